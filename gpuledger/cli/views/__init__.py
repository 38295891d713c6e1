"""How every command shows a table in the terminal, in one place:

* ``tables``: the renderer (``View``, ``Column``, ``print_table``): fits the terminal, never cuts a
  value; light, so a command's ``--help`` may import it (no polars);
* ``reports``: the columns, headers and units of the ``report`` and ``warehouse`` tables;
* ``plan``: the enforcement plan (``gpuledger enforce``);
* ``whatif``: the what-if and procurement tables (``gpuledger whatif``).
"""
