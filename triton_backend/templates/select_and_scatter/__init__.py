"""Select-and-scatter (max-pool's gradient): the plan, the template and its compile, in
``kernel``.
"""
