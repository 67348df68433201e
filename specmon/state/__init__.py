"""What the UI reads: the state store, the controller port, run status, the fleet."""
