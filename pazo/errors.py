"""Errors that mean "the user's input is wrong": reported as one message, never a traceback."""


class ConfigError(ValueError):
    pass


class DataMissingError(FileNotFoundError):
    """A data set or weights file is not where we looked: the message says what, where and how to
    get it."""


class DataCorruptError(DataMissingError):
    """A data file is there but cannot be used (truncated, garbage, another format): the message
    names the file, says what is wrong and how to get it again. A user's problem like a missing
    file (one line, exit 2), and a kind of one: the data set as it should be is not there."""
