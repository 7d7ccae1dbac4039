"""Task registry and converters: validated tasks on disk, hidden tests apart from public views."""
