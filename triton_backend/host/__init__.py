"""Host-side work around kernel launches: host ops (collectives on one device
among them), layout packing, input and output checks."""
