"""Errors that mean "the user's input is wrong": reported as one message, never a traceback."""


class ConfigError(ValueError):
    pass


class DataMissingError(FileNotFoundError):
    """A data set or weights file is not where we looked: the message says what, where and how to
    get it."""
