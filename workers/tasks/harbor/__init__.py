"""Harbor-format tasks: a directory per task, read into an image task."""
