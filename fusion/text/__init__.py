"""HLO text, read and written: the lexer, the parser (with its attribute, literal and shape
readers), the printer, and the ``backend_config`` formats.
"""
