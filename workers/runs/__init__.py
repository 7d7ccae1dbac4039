"""Programs run once for an HTTP client (``/run_code``): source in, compile and run results and files out."""
