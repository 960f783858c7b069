"""What one clause says (`Statement`), how sure the rules are of it, and how its content
is phrased about the user ("I prefer …" → "User prefers …", "我喜欢…" → "用户喜欢…").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from facts.enums import Authority, Durability, Scope
from facts.judging.rules_extractor.text import clean

_I = re.IGNORECASE

# Confidence levels. The gate's default threshold is 0.7: SURE and LIKELY pass, UNSURE
# goes to the review queue.
SURE = 0.9
LIKELY = 0.8
UNSURE = 0.45
HEDGED = 0.5


@dataclass
class Statement:
    """What one clause says, before the sentence-level labels are applied."""

    category: str
    key: str
    content: str
    confidence: float
    scope: str = Scope.USER
    durability: str = Durability.DURABLE
    authority: str = Authority.DESCRIPTIVE
    # A durable marker of its own ("always", "以后"): survives a question as an unsure candidate.
    standing: bool = False


_PRONOUNS = (
    (re.compile(r"\bI'm\b"), "they're"),
    (re.compile(r"\bI am\b"), "they are"),
    (re.compile(r"\bI've\b"), "they've"),
    (re.compile(r"\bI'd\b"), "they'd"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bmyself\b", _I), "themselves"),
    (re.compile(r"\bmy\b", _I), "their"),
    (re.compile(r"\bmine\b", _I), "theirs"),
    (re.compile(r"\bme\b", _I), "them"),
)


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def third_person_verb(verb: str) -> str:
    """'work with' → 'works with'."""
    first, _, rest = verb.partition(" ")
    if first.endswith(("s", "sh", "ch", "x", "o")):
        first += "es"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        first = first[:-1] + "ies"
    else:
        first += "s"
    return f"{first} {rest}".strip()


def en_content(template: str, x: str) -> str:
    return template.format(x=_third_person(clean(x)))


def zh_content(text: str) -> str:
    """'我比较喜欢X' → '用户比较喜欢X' (every 我 of the clause is the user)."""
    text = clean(text)
    text = re.sub(r"^我们", "用户所在团队", text)
    return text.replace("我", "用户") if text.startswith("我") else "用户" + text.replace("我", "用户")


# --- the object of a statement ---------------------------------------------------------
#
# "I love X": the fact is only as good as X. A careful reader keeps "User loves hiking"
# and "User likes movies that make them laugh"; not "User loves them", "User loves how
# uncomplicated it is", "User likes the actors and the plot" (of what?), nor a whole
# run-on sentence. `en_object` / `zh_object` return X cut to its claim, or None when X
# does not stand on its own.

# What follows these is the reason or the circumstance, not the thing liked: cut there.
_EN_CUT = re.compile(
    r"[,;]?\s+(?:because|since|as (?:it|they|these|those|this|that|i|we|he|she|there|my|the)\b|so (?:that|i|it)\b|"
    r"which|when(?:ever)?|while|but|although|though|even though|if|unless|until|after|before|where|whereas|"
    r"(?<!\bnow )and (?:i|i'm|i've|it|it's|that|they|my|then)\b|especially when|except)\b.*$|\s+[—–-]{1,2}\s+.*$",
    _I,
)
# Pointing at the conversation, in the user's own words ("them" is never the user here).
# (`wording.dangling_words` covers it, this, that world, there, he, she …)
_EN_OUTSIDE = re.compile(r"\b(?:they|them|their|theirs|ones|yours|such|same|former|latter|aforementioned)\b|\bone$", _I)
# "you" is the assistant: fine as the one who acts ("you to always explain", "you not use
# bullet points") or in what its answers are made of ("your replies"); "your idea" is
# something it said in this conversation.
_EN_YOU_OK = re.compile(
    r"\byou(?:\s+(?:to|not|never|always|don't|do not|didn't|use|show|give|explain|write|answer|reply|respond|ask|"
    r"call|keep|start|skip|avoid|stop|add|include|put|format|mention)\b)|\byour\s+(?:repl(?:y|ies)|answers?|"
    r"responses?|explanations?|code|examples?|messages?|summar(?:y|ies)|comments?|suggestions?|output)\b",
    _I,
)
# A time that only says when: "learning Rust this year", "I mainly write Go these days".
_EN_WHEN = re.compile(
    r"\s+(?:(?:this|next|every) (?:year|month|week|semester|term|summer|winter|spring|autumn|fall|weekend)|"
    r"these days|lately|recently|nowadays|at the moment|right now|currently|at present|for now)$",
    _I,
)
# A clause, not a thing: "how uncomplicated it is", "what you said".
_EN_CLAUSE_START = re.compile(r"^(?:how|what|why|where|who|whom|whose|whether|that|which|when|if|so|to be)\b", _I)
# "the X" names a thing of the conversation ("the actors", "the interview") unless X is a
# kind of thing everyone shares, a name, or said more of ("the art style of the Renaissance").
_EN_GENERIC_THE = frozenset(
    "beach beaches ocean sea sea's mountains mountain outdoors countryside city sun sunshine rain snow night "
    "morning mornings evening evenings weekend weekends piano guitar violin cello drums flute saxophone trumpet "
    "harp gym news radio theater theatre cinema movies library park parks forest woods desert lake lakes river "
    "rivers stars moon sky seaside wilderness suburbs internet web classics arts opera ballet blues "
    "holidays summer winter spring autumn fall rest most best".split()
)
# Ends that leave the statement unfinished ("I like to listen to").
_EN_OPEN_END = re.compile(r"\b(?:to|of|with|about|for|from|in|on|at|by|and|or|the|a|an|like|than|very|so)$", _I)
MAX_OBJECT_WORDS = 16


def en_object(raw: str) -> str | None:
    """The object of an English statement, or None when it points outside itself."""
    from facts.judging.wording import dangling_words

    x = clean(raw)
    if re.match(r"^it (?:when|whenever|if)\b", x, _I):
        # "I like it when you show an example first": about how to work with the user
        rest = re.sub(r"^it (?:when|whenever|if)\s+", "", x, flags=_I)
        without_you = re.sub(r"\byou(?:r)?\b", "", rest, flags=_I)
        if not rest or _EN_OUTSIDE.search(without_you) or dangling_words("User likes " + without_you):
            return None  # "I hate it when that happens"
        return x
    x = clean(_EN_CUT.sub("", x))
    # "…, sadly", "…, lol": the speaker's aside, not part of the fact
    x = clean(
        re.sub(
            r",\s*(?:sadly|unfortunately|honestly|actually|though|anyway|tbh|really)$|"
            r"(?:,\s*|\s+)(?:too|as well|lol|lmao|haha+|hehe)$",
            "",
            x,
            flags=_I,
        )
    )
    x = clean(_EN_WHEN.sub("", x))
    if not x or _EN_CLAUSE_START.match(x) or _EN_OPEN_END.search(x):
        return None
    if re.search(r"\byour?\b", _EN_YOU_OK.sub("", x), _I):
        return None
    if re.match(r"^to (?:think|say|believe|imagine|pretend|hear|know)\b", x, _I):
        return None  # "I like to think I'm a good cook": an opinion of oneself, not a liking
    if _EN_OUTSIDE.search(x) or dangling_words("User likes " + x) or len(x.split()) > MAX_OBJECT_WORDS:
        return None
    # "the N" alone ("the interview", "the actors and the plot") is a thing of the
    # conversation; "the dark theme", "the art style of the Renaissance" say which.
    if re.match(
        r"^the (?:first|second|third|fourth|last|other|next|previous|former|latter|same|above|following|original|new|old)\b",
        x,
        _I,
    ):
        return None  # "the second option": one of the things just shown
    m = re.match(r"^the\s+(?P<noun>[\w'-]+)(?:$|\s+(?:and|or|especially|most|a lot)\b)", x, _I)
    if m and m["noun"].lower() not in _EN_GENERIC_THE and not m["noun"][:1].isupper():
        return None
    # …and so is one at the end of a phrase: "the characters in the book", "the ending of the movie"
    m = re.search(r"\bthe\s+[a-z][\w'-]*\s+(?:in|of|from|on|at|about)\s+the\s+(?P<noun>[a-z][\w'-]*)$", x)
    if m and m["noun"] not in _EN_GENERIC_THE:
        return None
    if not re.search(r"[A-Za-z\u4e00-\u9fff]{2,}", x):
        return None
    return x


# Chinese: the claim ends at the first clause that gives a reason or an effect.
_ZH_CUT = re.compile(r"(?:因为|所以|但是|但|不过|可是|然而|而且|并且|然后|让|使得?|感觉|觉得|因此|于是|只是).*$|了$")
_ZH_ITEM = re.compile(r"^(?:和|以及|还有|及)?[^我你他她它这那是让使感觉得会要想吧呢吗啊]{1,10}$")
_ZH_CLAUSE_START = re.compile(r"^(?:的|了|过|着|得|地|吧|呢|啊|呀|是|把|被|让|到)")
MAX_ZH_OBJECT_CHARS = 24


def zh_object(raw: str) -> str | None:
    """The object of a Chinese statement, or None when it points outside itself."""
    from facts.judging.wording import dangling_words

    # a list runs on over commas ("唱歌跳舞，健身，旅游"); the first piece that is not one
    # more item ("尤其是去探险", "五花八门吧") ends the claim
    pieces = re.split(r"[，,；;]", clean(raw))
    kept = [pieces[0]]
    for piece in pieces[1:]:
        if not _ZH_ITEM.match(piece.strip()):
            break
        kept.append(piece.strip())
    x = clean(_ZH_CUT.sub("", "，".join(kept)))
    if len(x) < 2 or _ZH_CLAUSE_START.match(x) or len(x) > MAX_ZH_OBJECT_CHARS:
        return None
    if re.search(r"(?:的)?时(?:候)?$|之后$|以后$|之前$", x):
        return None  # "我在学习函数的概念时，…": when something happens, not what the user does
    # "电影中传递出的情感", "书里的角色": a thing inside a work the fact does not name
    if re.search(r"(?:电影|影片|书|小说|歌|曲子|剧|节目|故事|游戏|画|文章|课|展览)(?:中|里)", x) and "《" not in x:
        return None
    # "你" is the assistant: fine as the one who acts ("你用类比来解释", "你每次都问我")
    if dangling_words(x) or re.search(r"你|您", re.sub(r"^(?:你|您)(?=[^的])", "", x)):
        return None
    return x
