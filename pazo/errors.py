"""Errors that mean "the user's input is wrong": reported as one message, never a traceback."""


class ConfigError(ValueError):
    pass
