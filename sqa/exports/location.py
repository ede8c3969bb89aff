"""Where an export's files are: the folder a path names (export, run or weights file), its regular files.

Every file an export is read from must be a regular file inside its folder: no link, nothing that
resolves outside it.
"""

from __future__ import annotations

from pathlib import Path

from sqa.exports.errors import ExportError


def regular_file(directory: Path, name: str) -> Path:
    """`directory/name` if it is a regular file inside `directory` (no link), else ExportError."""
    path = directory / name
    if path.is_symlink():
        raise ExportError(f"{path}: is a symbolic link; an export's files must be regular files inside it")
    if not path.exists():
        raise ExportError(f"{path}: not found; is {directory} an sqa export directory?")
    if not path.is_file():
        raise ExportError(f"{path}: not a regular file")
    if path.resolve().parent != directory.resolve():
        raise ExportError(f"{path}: resolves outside {directory}")
    return path


def resolve_export(path: str | Path) -> tuple[Path, Path]:
    """(config.yaml, weights file) of an export dir, a run dir holding export/, or a model.pt file."""
    path = Path(path).expanduser()
    if path.is_file():
        directory = path.parent.resolve()
        if path.is_symlink():
            raise ExportError(f"{path}: is a symbolic link; name the weights file itself")
        return regular_file(directory, "config.yaml"), regular_file(directory, path.name)
    if not path.is_dir():
        raise ExportError(
            f"{path}: not found; expected an export directory (config.yaml, model.pt), "
            "a run directory holding export/, or a model.pt beside its config.yaml"
        )
    directory = path.resolve()
    # A run directory holds its own config.yaml (the training config) beside export/.
    if not (directory / "model.pt").exists() and (directory / "export").exists():
        if (directory / "export").is_symlink():
            raise ExportError(f"{directory / 'export'}: is a symbolic link out of the run directory")
        directory = directory / "export"
    return regular_file(directory, "config.yaml"), regular_file(directory, "model.pt")
