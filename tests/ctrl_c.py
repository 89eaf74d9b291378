"""For the tests that send a Ctrl-C to a script of their own (SIGINT to its process group, as a
terminal sends it): ``AS_IN_A_TERMINAL`` goes first in the script, so that SIGINT raises
KeyboardInterrupt there whatever the test run inherited. A run started in the background of a
non-interactive shell (``cmd &``) has SIGINT ignored, and a process keeps an ignored SIGINT
across exec: the scripts' Ctrl-C then raised nothing, on the old code as on the new."""

AS_IN_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
