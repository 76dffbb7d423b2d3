"""The Model Context Protocol server (``veotrace mcp``): every registered command as a tool an assistant calls.

This package owns the server and nothing else: the tools are generated from ``veotrace.registry`` and
the command-line options each command declares (``schema``), a call's arguments are checked against the
server's rules and turned into the command's own command line (``calls``: roots, no URL unless allowed,
no option that writes a file, runs a program or reaches a cluster), the command runs in a warm worker
process that can be stopped (``worker``: imports kept warm, a call bounded in time, the CLI's own
``Error:`` line on a refusal), and the result is the command's ``--format json`` object cut to what an
assistant can read (``calls.cut``). ``server`` speaks the protocol through the official SDK (the
``mcp`` package, extra ``veotrace[mcp]``) over stdio or streamable HTTP on the loopback.

Nothing here reads a trace itself: every file is read by the command, through the same safe readers
and limits as on the command line.
"""
