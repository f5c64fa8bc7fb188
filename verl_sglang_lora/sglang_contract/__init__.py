"""The wire contract with SGLang: launch args, adapter config, request structs, weight names, error texts.

Everything here is built from what the *installed* SGLang declares (struct fields, supported module names),
never from a version table alone.
"""
