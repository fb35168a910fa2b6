"""The operator verbs under the path the README taught first (`from poller import
administration`, then `administration.create(...)`); they live in poller.operations, the one
operator package, which new code imports."""

from poller.operations import *  # noqa: F403 - the same names, nothing of its own
from poller.operations import __all__ as __all__
