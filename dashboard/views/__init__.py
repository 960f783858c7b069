"""The dashboard's pages, one module per area (facts, review, profiles, people, turns,
export, conflicts, context preview, search playground, index console, audit log, agents,
overview). `dashboard.urls` maps them to their URLs."""
