"""The course's optional dependencies, imported where they are used.

spaCy (tokenising Multi30k), sacreBLEU (the standard BLEU report) and SentencePiece (the recipe's subwords) are
the ``text`` extra of the package (pyproject.toml): notebooks 07-09 install it, the first notebooks do not, so
importing ``transformer_course`` never needs them.
"""
import importlib


def import_extra(module, purpose):
    """``module``, imported; if it is not installed, a ModuleNotFoundError that says what needs it and how to
    install it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        distribution = module.split(".")[0]
        raise ModuleNotFoundError(
            f"{purpose} needs {distribution}, which comes with the course's `text` extra (requirements.txt and the "
            f"install cell of notebooks 07-09 install it): pip install {distribution}") from error
