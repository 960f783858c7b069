"""Every form of the dashboard: each input a page takes, GET filters and the search box
included, goes through one of these. `common` holds what several pages share (the id
pickers, scope filters, a reason, a person's id, paging); `memory` the pages that change
memory, `reading` the pages that read it, `people` people, accounts, keys and projects."""
