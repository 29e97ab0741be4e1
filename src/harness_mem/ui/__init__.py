"""The memory browser (``harness-mem ui``): what the memory holds, why, and since when — and a way
to remove what it should not keep.

- :mod:`.security`: who may use it (the shared :mod:`harness_mem.access` rules, a session cookie,
  Origin and CSRF checks, protective headers);
- :mod:`.pages`: what each page shows, as functions of the store;
- :mod:`.actions`: what it can change, through the operations the CLI and MCP use;
- :mod:`.app`: the routes and templates; :mod:`.server`: binding, printing the URL, serving.
"""
