"""The domain's words: events, errors, secrets, safe terminal text, run ends. Imports nothing above it."""
