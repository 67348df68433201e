"""The console: a keyboard-driven Textual app that reads only the event bus and state store."""
