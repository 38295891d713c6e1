"""Fair share: snapshots of the org tree's fair-share order kept over time."""
