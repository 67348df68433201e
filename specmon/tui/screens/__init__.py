"""The console's screens: help, relaunch form, confirmations, GPU detail and history charts."""
