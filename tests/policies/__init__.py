"""Scripted policies (``module:function``) that act like competent agents on the built-in suites."""
