"""Harbor task images: built once per host from a task's environment/ context, from local bases only."""
