"""What runs: the launch spec and the configuration it is built from."""
