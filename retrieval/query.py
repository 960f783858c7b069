"""What a question asks about: its words without the question's frame (issue 36).

An agent asks memory "When did I mention the museum?", "Do you remember what exhibition
I saw?", "我曾经和你提到过我养的宠物，它叫什么名字？". The frame — question words,
auxiliaries, the verbs of the conversation itself (remember, mention, tell, share, talk;
记得, 提到, 告诉, 分享, 聊) and when it was said (once, before, ago; 曾经, 之前) — says
nothing about the fact sought, yet it drives both halves of the search: the sentence
encoder puts a question next to other questions (on MemoryBank's raw turns the vectors'
top hit was a question for 79 % of the probing questions, 55 % once the frame is gone),
and the conversation verbs match every chatty turn that says "share" or "talk".

`core` removes those words and the question marks and keeps the rest in order: the
text both halves search with. What it cannot catch: a frame word that is the subject
itself ("what did I say about the word 'remember'") loses that word (the other words
still match), and frames in languages other than English and Chinese stay (the encoder
is multilingual, these lists are not).
"""

from __future__ import annotations

import re

from .tokenize import HAN, cut

# Question words, auxiliaries, the verbs and adverbs of talking about the conversation,
# the tag "…, right?" and the assistant it is asked of ("you"). Pronouns of the user
# (I, my) stay: in raw turns a statement says "I …".
_EN_FRAME = frozenset(
    """
    what when where which who whom whose why how
    do does did done is are was were am be been can could would will shall should have has had
    remember remembers remembered recall recalls recalled remind reminded forget forgot
    mention mentions mentioned tell tells told say says said saying share shares shared
    talk talks talked talking chat chats chatted discuss discussed ask asks asked know knew
    once before ago previously earlier ever again still right correct please you your yours
    """.split()
)
# jieba's words (`jieba.lcut`): the same kinds of words in Chinese, plus the particles a
# question ends with.
_ZH_FRAME = frozenset(
    """
    什么 哪些 哪个 哪 哪里 哪儿 谁 为什么 怎么样 怎样 怎么 如何 多少 几 吗 呢 吧 对吗 是不是 是吗 对不对
    还记得 记得 记不记得 忘 忘记 知道 曾经 曾 之前 以前 上次 那时 当时 提到 提到过 提起 提过 说过 说起
    告诉 告诉过 分享 分享过 聊 聊过 聊天 谈 谈过 谈到 问过 讲过 你 您 还 过 了 的 是
    """.split()
)
# "和你 / 跟你 / 向你 / 给你 / 对你": the preposition goes with the "you" it introduces.
_TO_YOU = frozenset("和 跟 向 给 对 同".split())
_YOU = frozenset("你 您".split())
_PIECES = re.compile(rf"[{HAN}]+|[^\W_{HAN}]+(?:'[^\W_]+)?|\s+|.", re.UNICODE)
_HAN_START = re.compile(rf"[{HAN}]")
_WORDISH = re.compile(r"[^\W_]")


def core(text: str) -> str:
    """`text` without its question frame; `text` itself when nothing else is left."""
    if not text:
        return text
    out: list[str] = []
    for match in _PIECES.finditer(text):
        piece = match.group()
        if piece in ("?", "？"):
            continue
        if _HAN_START.match(piece):
            out.append(_han_core(piece))
        elif _WORDISH.match(piece):
            # "what's", "didn't": the word before the apostrophe decides.
            if piece.lower().split("'")[0] not in _EN_FRAME:
                out.append(piece)
        else:
            out.append(piece)
    kept = re.sub(r"\s+", " ", "".join(out))
    kept = re.sub(r"\s+([,.;:!，。；：！、])", r"\1", kept).strip(" ,.;:!，。；：！、")
    return kept if _WORDISH.search(kept) else text


def _han_core(run: str) -> str:
    words = cut(run)
    kept: list[str] = []
    for i, word in enumerate(words):
        if word in _ZH_FRAME:
            continue
        if word in _TO_YOU and i + 1 < len(words) and words[i + 1] in _YOU:
            continue
        kept.append(word)
    return "".join(kept)


# The same facts said and asked, for `embedding.question_direction`: everyday memory, in
# both languages the product serves, none taken from an evaluation set. What the pairs
# differ by is the asking.
QUESTION_PAIRS: tuple[tuple[str, str], ...] = (
    ("I like green tea.", "What do I like to drink?"),
    ("My sister lives in Boston.", "Where does my sister live?"),
    ("I started learning Spanish last month.", "When did I start learning Spanish?"),
    ("The meeting is on Friday.", "When is the meeting?"),
    ("I work as a nurse at a hospital.", "What is my job?"),
    ("We went hiking in the mountains last weekend.", "Where did we go hiking?"),
    ("My favourite band is Coldplay.", "Which band is my favourite?"),
    ("I am allergic to peanuts.", "Am I allergic to anything?"),
    ("The project uses PostgreSQL 16.", "Which database does the project use?"),
    ("I bought a new bike yesterday.", "Did I buy anything recently?"),
    ("I have two cats named Tom and Mia.", "Do I have any pets?"),
    ("The report is due next Monday.", "When is the report due?"),
    ("我喜欢喝绿茶。", "我喜欢喝什么？"),
    ("我姐姐住在上海。", "我姐姐住在哪里？"),
    ("我上个月开始学西班牙语。", "我什么时候开始学西班牙语的？"),
    ("会议定在周五。", "会议是什么时候？"),
    ("我在医院当护士。", "我的工作是什么？"),
    ("上周末我们去山里徒步了。", "我们上周末去哪里徒步了？"),
    ("我最喜欢的乐队是五月天。", "我最喜欢哪个乐队？"),
    ("我对花生过敏。", "我对什么过敏吗？"),
    ("项目使用 PostgreSQL 16。", "项目用的是什么数据库？"),
    ("我昨天买了一辆新自行车。", "我最近买了什么东西吗？"),
    ("我养了两只猫。", "我养宠物吗？"),
    ("报告下周一交。", "报告什么时候交？"),
)
