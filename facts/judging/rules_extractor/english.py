"""The rules reading one English clause: names, grants to act, goals, attributes, work,
likes and dislikes, tools, and standing instructions. Returns a `Statement` or None;
the sentence-level labels (question, one-off, hedge) are applied by the extractor.
"""

from __future__ import annotations

import re

from facts.enums import Authority, Category, Durability
from facts.judging.rules_extractor.keys import (
    ATTRIBUTES,
    LANGS,
    PREFERENCE_TOPICS,
    ROLE_WORDS,
    TOOL_TOPICS,
    ZH_ROLE_WORDS,
    key_of,
    slug_of,
    topic_of,
)
from facts.judging.rules_extractor.markers import EN_DURABLE, EN_TEMPORARY
from facts.judging.rules_extractor.statement import (
    LIKELY,
    SURE,
    UNSURE,
    Statement,
    en_content,
    en_object,
    third_person_verb,
)
from facts.judging.rules_extractor.text import clean
from facts.judging.schemas import normalize_key

_I = re.IGNORECASE


def _role(x: str) -> bool:
    head = re.split(r"\b(?:at|in|for|with|who|and|but|from|on)\b|[,(]", x, maxsplit=1, flags=_I)[0]
    return bool(ROLE_WORDS.search(head) or ZH_ROLE_WORDS.search(head))


# What a standing instruction to the assistant starts with: something the assistant
# does when it answers or works ("always answer in English", "never push to main").
# "Never give up", "always look on the bright side", "never been on a sports team" are
# mottos and fragments, not instructions: their verb is not one of these, or (give up,
# show off) it is the idiom, not the action.
_ASSISTANT_VERBS = re.compile(
    r"^(?:please\s+)?(?:answer|reply|respond|write|explain|use|give|show|include|add|put|format|translate|comment|"
    r"cite|quote|link|mention|ask|call|suggest|recommend|summari[sz]e|list|number|wrap|indent|name|return|start|"
    r"begin|end|finish|keep|avoid|skip|omit|leave out|assume|check|double-check|test|run|document|type|label|"
    r"sign|prefix|mark|speak|talk|send|tell|remind|review|correct|spell|capitali[sz]e|print|log|commit|push|"
    r"deploy|merge|rebase|squash|refer to|address|reference|attach|provide|offer|respond|stick to|default to|"
    r"switch to|go with|print|lint|pin|sort|limit|split|break|highlight|bold|show me|give me)\b"
    r"(?!\s+(?:up|in|out|away|off|back|over|around|it a (?:go|try))\b)",
    _I,
)


def assistant_action(x: str) -> bool:
    """Does `x` ask the assistant to do something when it works for the user?"""
    if not x or _THREADISH.match(x) or (en_object(x) is None and not re.search(r"\bme\b", x, _I)):
        return False
    return bool(_ASSISTANT_VERBS.match(x) or topic_of(x, PREFERENCE_TOPICS))


_THREADISH = re.compile(
    r"^(?:this|that|these|those|it(?! when| if| whenever)|where this|how (?:this|you)|what you|"
    r"the (?:bug|code|error|file|function|answer|one|idea|approach|plan))\b",
    _I,
)


def en_statement(clause: str) -> Statement | None:
    c = clause
    x: str | None  # a clause's object; en_object's is None when it points outside the clause
    m = re.match(r"^my name(?:'s| is)\s+(?P<x>.+)", c, _I) or re.match(r"^i(?:'m| am) called\s+(?P<x>.+)", c, _I)
    if m:
        x = clean(m["x"])
        return Statement(Category.CONTEXT, "name", f"User's name is {x}.", SURE if len(x.split()) <= 4 else UNSURE)
    m = re.match(r"^(?:please\s+)?(?:you (?:can|may|should)\s+)?(?:just\s+)?(?:always\s+)?call me\s+(?P<x>.+)", c, _I)
    if m:
        x = clean(m["x"])
        return Statement(Category.PREFERENCE, "preferred_name", f"User wants to be called {x}.", SURE, standing=True)
    if re.match(r"^i(?:'d| would) (?:like|love) (?:you )?to be called\s+", c, _I):
        x = clean(re.sub(r"^.*?called\s+", "", c, flags=_I))
        return Statement(Category.PREFERENCE, "preferred_name", f"User wants to be called {x}.", SURE, standing=True)

    # permissions: a grant to act is transactional, whatever it says about the future
    m = re.match(
        r"^(?:you (?:can|may|are allowed to|'re allowed to|have (?:my )?permission to|are free to|"
        r"(?:don't|do not|no longer) need to ask(?: me)?(?: before| to| for)?)|feel free to|go ahead and|"
        r"no need to ask(?: me)?(?: before| to| for)?|i (?:authori[sz]e|allow|permit) you to|"
        r"i give you (?:my )?permission to|you have my (?:permission|ok|blessing) to)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        x = clean(m["x"])
        key = normalize_key("permission_" + (slug_of(x).split("_")[0] or "act"))
        return Statement(
            Category.PREFERENCE,
            key,
            en_content("User allows you to {x}.", x),
            LIKELY,
            authority=Authority.TRANSACTIONAL,
        )

    m = re.match(r"^i(?:'m| am)\s+(?:currently\s+|now\s+|still\s+)?(?:learning|studying)\s+(?P<x>.+)", c, _I)
    if m:
        x = en_object(m["x"])
        if x is None or _THREADISH.match(x):
            return None
        return Statement(
            Category.GOAL, key_of("learning", x, topics=()), en_content("User is learning {x}.", x), LIKELY
        )
    m = re.match(r"^i(?:'m| am)\s+(?:currently\s+)?(?:preparing|studying) for\s+(?P<x>.+)", c, _I)
    if m:
        x = en_object(m["x"])
        if x is None:
            return None
        statement = Statement(
            Category.GOAL, key_of("preparing", x, topics=()), en_content("User is preparing for {x}.", x), LIKELY
        )
        if re.match(r"^(?:a|an)\b", x, _I):
            statement.durability = Durability.TEMPORARY  # one speech, one interview: an event, not a lasting goal
        return statement
    m = re.match(r"^i want to (?:become|be) (?:a|an)\s+(?P<x>.+)", c, _I)
    if m:
        x = en_object(m["x"])
        if x is None:
            return None
        return Statement(Category.GOAL, "career_goal", en_content("User wants to become a {x}.", x), LIKELY)
    m = re.match(r"^i(?:'m| am) (?:trying|planning|hoping) to\s+(?P<x>.+)", c, _I)
    if m:
        x = en_object(m["x"])
        if x is None:
            return None
        return Statement(Category.GOAL, key_of("goal", x, topics=()), en_content("User is trying to {x}.", x), UNSURE)

    m = re.match(r"^my\s+(?P<attr>[a-z][a-z' -]{0,30}?)\s+(?P<be>is|are)\s+(?P<x>.+)", c, _I)
    if m:
        attr, be = m["attr"].lower().strip(), m["be"].lower()
        x = clean(m["x"]) if attr == "pronouns" else en_object(m["x"])  # "she/her" names no one
        if x is None:
            return None
        fav = re.match(r"^(?:favou?rite|preferred|go-to|default)\s+(?P<what>.+)$", attr)
        if fav:
            what = fav["what"]
            key = (
                normalize_key("favorite_" + what)
                if fav.group(0).startswith("fav")
                else normalize_key("preferred_" + what)
            )
            return Statement(Category.PREFERENCE, key[:60], en_content(f"User's {attr} {be} {{x}}.", x), SURE)
        main = re.match(r"^(?:main|primary|daily)\s+(?P<what>.+)$", attr)
        if main and main["what"] in ("editor", "language", "programming language", "os", "stack", "shell", "ide"):
            key = {"language": "programming_language", "programming language": "programming_language"}.get(
                main["what"], ATTRIBUTES.get(main["what"], (normalize_key(main["what"]), ""))[0]
            )
            return Statement(Category.CONTEXT, key, en_content(f"User's {attr} is {{x}}.", x), SURE)
        if attr in ATTRIBUTES:
            key, category = ATTRIBUTES[attr]
            return Statement(category, key, en_content(f"User's {attr} {be} {{x}}.", x), SURE)
        return None

    m = re.match(r"^i work (?P<prep>as|at|for|in|on)\s+(?P<x>.+)", c, _I)
    if m:
        prep, x = m["prep"].lower(), en_object(m["x"]) or ""
        if not x or _THREADISH.match(x) or EN_TEMPORARY.search(x):
            return None
        if prep == "as":
            return Statement(Category.CONTEXT, "occupation", en_content("User works as {x}.", x), SURE)
        if prep in ("at", "for"):
            return Statement(Category.CONTEXT, "employer", en_content(f"User works {prep} {{x}}.", x), SURE)
        if prep == "in" and topic_of(x, TOOL_TOPICS) == "programming_language":
            return Statement(Category.CONTEXT, "primary_stack", en_content("User works in {x}.", x), LIKELY)
        key = "industry" if prep == "in" else "work_focus"
        return Statement(Category.CONTEXT, key, en_content(f"User works {prep} {{x}}.", x), LIKELY)

    m = re.match(r"^i(?:'m| am|'ve been| have been)\s+(?:a|an)\s+(?P<x>.+)", c, _I)
    if m:
        x = clean(m["x"])
        fan = re.match(r"^(?:big |huge )?fan of\s+(?P<y>.+)", x, _I)
        if fan:
            y = en_object(fan["y"])
            if y is None:
                return None
            return Statement(Category.PREFERENCE, key_of("likes", y), en_content("User is a fan of {x}.", y), LIKELY)
        if re.match(r"^native\b.*\bspeaker\b", x, _I):
            return Statement(Category.CONTEXT, "native_language", en_content("User is a {x}.", x), SURE)
        if _role(x):
            return Statement(Category.CONTEXT, "occupation", en_content("User is a {x}.", x), SURE)
        return None
    m = re.match(
        r"^i(?:'m| am)\s+(?P<adj>new to|familiar with|not familiar with|unfamiliar with|experienced (?:in|with)|"
        r"fluent in|proficient (?:in|with)|comfortable with|not comfortable with|good at|bad at|not good at|"
        r"allergic to|based in|located in|originally from|from|living in|vegetarian|vegan|colou?r-?blind|"
        r"left-handed|dyslexic|deaf|hard of hearing|retired|self-employed|a native (?:\w+ )?speaker(?: of)?)"
        r"\b\s*(?P<x>.*)",
        c,
        _I,
    )
    if m:
        adj, x = m["adj"].lower(), clean(m["x"])
        if x:
            x = en_object(x) or ""
            if not x:
                return None
        if _THREADISH.match(x):
            return None
        if adj in ("based in", "located in", "living in"):
            return Statement(Category.CONTEXT, "location", en_content(f"User is {adj} {{x}}.", x), SURE)
        if adj in ("from", "originally from"):
            if re.match(r"^(?:the|a|an|our|my|this|that)\b", x, _I) or not x[:1].isupper():
                return None  # "I'm from the QA team" is not where they come from
            return Statement(Category.CONTEXT, "hometown", en_content(f"User is {adj} {{x}}.", x), LIKELY)
        if adj.startswith("a native"):
            return Statement(Category.CONTEXT, "native_language", en_content("User is {x}.", clause[clause.lower().index("a native"):]), SURE)  # fmt: skip
        if adj == "allergic to":
            return Statement(Category.CONTEXT, "allergies", en_content("User is allergic to {x}.", x), SURE)
        if not x:
            return Statement(Category.CONTEXT, normalize_key(adj), en_content("User is {x}.", adj), SURE)
        key = normalize_key("familiarity_" + (slug_of(x) or "general"))[:60]
        return Statement(Category.CONTEXT, key, en_content(f"User is {adj} {{x}}.", x), LIKELY)
    m = re.match(r"^i live in\s+(?P<x>.+)", c, _I)
    if m and en_object(m["x"]):
        return Statement(Category.CONTEXT, "location", en_content("User lives in {x}.", en_object(m["x"]) or ""), SURE)
    m = re.match(r"^i speak\s+(?P<x>.+)", c, _I)
    if m and re.search(LANGS, m["x"], _I):
        return Statement(Category.CONTEXT, "languages_spoken", en_content("User speaks {x}.", m["x"]), LIKELY)

    # dislikes before likes: "I don't like" contains "like"
    m = re.match(
        r"^i\s+(?:really\s+|just\s+|generally\s+|usually\s+|honestly\s+)?(?:don't|do not|dont|never)\s+"
        r"(?P<verb>like|love|enjoy|want|need|use|care for)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        verb, x = m["verb"].lower(), en_object(m["x"]) or ""
        if not x or _THREADISH.match(x):
            return None
        if verb == "use":
            return Statement(Category.CONTEXT, key_of("uses", x, topics=TOOL_TOPICS), en_content("User does not use {x}.", x), LIKELY)  # fmt: skip
        if verb in ("want", "need") and not (re.match(r"^you to\b", x, _I) or topic_of(x, PREFERENCE_TOPICS)):
            return None  # "I don't want to make everything worse": a worry of the moment, not a preference
        confidence = LIKELY if verb in ("want", "need") else SURE
        return Statement(
            Category.PREFERENCE, key_of("pref", x), en_content(f"User does not {verb} {{x}}.", x), confidence
        )
    m = re.match(
        r"^i\s+(?:really\s+|just\s+)?(?P<verb>hate|dislike|can't stand|cannot stand|detest)\s+(?P<x>.+)", c, _I
    )
    if m:
        x = en_object(m["x"]) or ""
        if not x or _THREADISH.match(x):
            return None
        return Statement(Category.PREFERENCE, key_of("pref", x), en_content("User dislikes {x}.", x), SURE)

    m = re.match(
        r"^i\s+(?P<adv>(?:(?:really|strongly|generally|usually|much|definitely|always|still|also|do|mostly|"
        r"personally)\s+)*)(?P<verb>prefer|like|love|enjoy|favou?r|want|need)s?\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        verb, x = m["verb"].lower(), en_object(m["x"]) or ""
        if _THREADISH.match(x) or not x:
            return None
        if verb in ("want", "need"):
            if not (re.match(r"^(?:you to )?(?:always|never)\b", x, _I) or topic_of(x, PREFERENCE_TOPICS)):
                return None  # "I want a function that …" is a task
            return Statement(Category.PREFERENCE, key_of("pref", x), en_content("User wants {x}.", x), LIKELY)
        third = {"prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys"}.get(verb, "favors")
        return Statement(Category.PREFERENCE, key_of("pref", x), en_content(f"User {third} {{x}}.", x), SURE)
    m = re.match(r"^i(?:'d| would)\s+(?:much\s+)?(?P<verb>prefer|rather|like|love)\s+(?P<x>.+)", c, _I)
    if m:
        x = en_object(m["x"]) or ""
        if _THREADISH.match(x) or not x:
            return None
        standing = bool(EN_DURABLE.search(x))
        # "I'd rather you not use bullet points" addresses how to work with them
        addressed = bool(re.match(r"^(?:that )?you\s+(?:not|never|always|didn't|don't|do not|avoid|stop)\b", x, _I))
        confidence = LIKELY if standing or addressed else UNSURE
        return Statement(Category.PREFERENCE, key_of("pref", x), en_content("User would prefer {x}.", x), confidence, standing=standing)  # fmt: skip

    m = re.match(
        r"^i\s+(?P<adv>(?:(?:usually|mostly|mainly|primarily|generally|normally|typically|always|often|only|"
        r"exclusively|daily|also)\s+)*)(?P<verb>use|work with|code in|program in|write in|develop in|develop with|"
        r"build with|write|run|develop|deploy to|deploy on|code)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        adv, verb, x = m["adv"].strip().lower(), m["verb"].lower(), en_object(m["x"]) or ""
        if not x or _THREADISH.match(x) or re.search(r"\b(?:here|in this|for this)\b", x, _I):
            return None
        habitual = bool(adv) and "also" not in adv
        strong = verb in ("use", "work with", "code in", "program in", "write in", "develop in", "develop with")
        confidence = LIKELY if habitual or strong else UNSURE
        topic = topic_of(x, TOOL_TOPICS)
        key = (
            "primary_stack"
            if topic == "programming_language" and verb != "use"
            else topic or key_of("uses", x, topics=())
        )
        phrase = f"{adv} {third_person_verb(verb)}".strip()
        return Statement(Category.CONTEXT, key, en_content(f"User {phrase} {{x}}.", x), confidence)

    # standing instructions
    m = re.match(
        r"^(?:please\s+)?(?:(?:do not|don't) ever|never ever|never|always|make sure to always)\s+(?P<x>.+)", c, _I
    )
    # A standing instruction starts with what to do ("never use tabs"); "…, never on
    # Mondays" is an elliptical clause whose verb stayed in the clause before it.
    if m and assistant_action(clean(m["x"])):
        x = clean(m["x"])
        word = "never" if re.match(r"^(?:please\s+)?(?:do not|don't|never)", c, _I) else "always"
        return Statement(
            Category.PREFERENCE,
            key_of("pref", x),
            en_content(f"User wants you to {word} {{x}}.", x),
            SURE,
            standing=True,
        )
    m = re.match(
        r"^(?:please\s+)?(?:from now on|going forward|in (?:the )?future|from here on(?: out)?|henceforth|"
        r"by default|in general|as a rule|for all (?:future )?(?:answers|replies|responses))\s*[,:]?\s*(?:please\s+)?(?P<x>.+)",
        c,
        _I,
    )
    if m and m["x"]:
        x = clean(m["x"])
        if re.match(r"^i\b", x, _I):  # "By default, I use vim"
            inner = en_statement(x)
            wish = re.match(r"^i (?:want|need|'d like|would like)\s+(?P<y>.+)", x, _I)
            if inner is None and wish:  # "In general I want the shortest solution": a standing wish
                y = wish["y"]
                inner = Statement(Category.PREFERENCE, key_of("pref", y), en_content("User wants {x}.", y), SURE)
            if inner is not None:
                inner.standing = True
            return inner
        # "In general, the code looks fine" is no request
        if not assistant_action(x):
            return None
        return Statement(Category.PREFERENCE, key_of("pref", x), en_content("User's standing request: {x}.", x), SURE, standing=True)  # fmt: skip
    m = re.match(r"^(?:please\s+)?(?:whenever|every time|each time|any time) you\s+(?P<x>.+)", c, _I)
    if m:
        x = clean(m["x"])
        # "whenever you write Python, use type hints": the request is what follows the
        # condition; "whenever you need me, just open the device" asks nothing of the work
        when, comma, request = x.partition(",")
        if not assistant_action(when):
            return None
        request = clean(re.sub(r"^(?:please|just|always)\s+", "", clean(request), flags=_I))
        # (its words may point back into the condition: "include its license")
        if comma and not (_ASSISTANT_VERBS.match(request) or topic_of(request, PREFERENCE_TOPICS)):
            return None
        # alone, "whenever you write Python" is half a request: unsure until its request follows
        confidence = LIKELY if comma else UNSURE
        return Statement(Category.PREFERENCE, key_of("pref", x), en_content("User's standing request: whenever you {x}.", x), confidence, standing=True)  # fmt: skip
    return None
