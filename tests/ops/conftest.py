"""pytest setup for the operator oracle files (tests/ops/<op>/test_<op>_oracle.py): their shared
support module, tests/oracle/oracle_support.py, is imported from tests/oracle."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracle"))
