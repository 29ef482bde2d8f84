"""Every op's lowering rule: the elementwise expression table, values, reductions, memory."""
