"""Import a command-line script from tools/ in tests (tools/ is not a package)."""
import importlib.util
import os
from types import ModuleType

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py as a module, under a private name so that it cannot shadow a package."""
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", os.path.join(TOOLS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
