"""Progress bars: tqdm's notebook widget where Jupyter can draw it, its text bar elsewhere.

``tqdm.auto`` makes that choice too, but in a Jupyter kernel without ipywidgets (a plain Jupyter install) it also
warns "IProgress not found. Please update jupyter and ipywidgets" the moment it is imported, which put the warning
under every notebook's set-up cell. The course's modules import ``tqdm`` from here: the same choice, no warning.
"""
import warnings

from tqdm import TqdmWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", TqdmWarning)   # only the missing-ipywidgets warning is raised on import
    from tqdm.auto import tqdm

__all__ = ["tqdm"]
