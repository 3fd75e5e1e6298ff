"""The golden runs (`cases.py`, recorded by `record.py`, compared by tests/test_golden.py)."""
