"""Make any text storable in a PostgreSQL `text` column: a handler's exception message, a park
reason. Such text comes from code we do not control, so this never raises on a `str`."""

# Enough for an exception message and the head of a traceback line, small enough that a
# message failing on every retry cannot bloat its row.
DEFAULT_LIMIT = 2000

_CUT = "... [cut {} characters]"


def storable_text(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """`text` without NUL, lone surrogates as U+FFFD, at most `limit` characters long.

    A longer text keeps its head and ends with a mark saying how many characters were cut.
    """
    if limit < 0:
        raise ValueError(f"limit must not be negative, not {limit}")
    if len(text) <= limit:
        return _cleaned(text)  # cleaning never lengthens, so the text still fits
    # The mark's room is sized for cutting the whole text, the most it could ever say.
    room = len(_CUT.format(len(text)))
    if room > limit:  # too small a limit to say what was cut
        return _cleaned(text[:limit])
    kept = limit - room
    return _cleaned(text[:kept]) + _CUT.format(len(text) - kept)


def _cleaned(text: str) -> str:
    # PostgreSQL text cannot hold NUL at all ("invalid byte sequence for encoding").
    text = text.replace("\x00", "")
    # isascii() reads a flag the string already carries; only other text can hold surrogates.
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        # Through UTF-16 and back: a high and a low surrogate that stand side by side become
        # the one character they encode, and each lone one becomes U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
