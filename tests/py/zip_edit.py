"""Rewriting the entries of a zip-based Latch file (artifact or checkpoint) for the tests that
feed Latch damaged or foreign files."""
import io
import zipfile


def rewrite_zip(path, edit) -> None:
    """Rewrite the zip at ``path`` with ``edit(files)`` applied to its {name: bytes} (valid
    CRCs, so only Latch's own checks can catch the change)."""
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    edit(files)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
    path.write_bytes(buf.getvalue())
