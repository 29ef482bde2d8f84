"""Every op's lowering rule: the elementwise expression table, values, reductions, memory.

The rule table is ``value_rules.rule_for``, which the kernel emitters hand to ``ValueEmitter``
(the emitter does not import the rules, which call back into it).  This package's
``__init__`` imports none of its modules: ``combine_function`` (below the rules) imports
``memory_rules``.
"""
