"""HLO text, read and written: the lexer, the parser (with its attribute, literal and shape
readers, and the shapes it infers where the text leaves them out), the printer, and the
``backend_config`` formats.
"""
