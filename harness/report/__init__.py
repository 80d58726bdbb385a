"""What people read: terminal and Markdown summaries, diffs, calibration tables, progress."""
