"""The console's panels, one widget per file; each redraws from the state store on a timer."""
