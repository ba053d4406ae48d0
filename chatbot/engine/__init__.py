"""The graph and what it calls: wiring, folding, the model factory, the model list, the call log,
run settings."""
