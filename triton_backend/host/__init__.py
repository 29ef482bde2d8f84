"""Host-side work around kernel launches: host ops, layout packing, input and output checks."""
