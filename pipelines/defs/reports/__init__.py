"""Finance statements: the month's statement files on the 1st for the month before, the weekly
summary on Mondays, optionally e-mailed to finance."""
