"""The golden runs (`cases.py`, recorded by `record.py`, compared by tests/paper/test_golden.py)."""
