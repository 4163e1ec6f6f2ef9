"""Elements of user sources: values flattened for the wire, their specs, their batches."""
