"""The ledger: what the warehouse was told and issued, kept so that history does not move.

* ``config_versions``: every config loaded is a version (content, hash, source, who, when);
  commands use the stored one; only ``gpuledger config load`` adds a version.
* ``periods``: ``period close`` freezes a month's chargeback statement, corrections re-issue it
  as credit / debit lines; :func:`periods.statement_lines` is the one place statements are read.
* ``audit``: who did what, when and why.
"""
