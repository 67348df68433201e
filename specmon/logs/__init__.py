"""Reading logs in bulk: parallel parts, time windows, compressed files, event lines."""
