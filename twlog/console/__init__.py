"""C{twlog console}: a web console for a twlog cluster (docs/console.md).

A C{twisted.web} site: HTML pages at stable addresses (C{/topics/<topic>}, C{/groups/<group>}, ...), each
drawn in the browser from the JSON API under C{/api/} (L{twlog.console.http}), which scripts can use too.
Everything it serves ships in this package (C{static/}); nothing is fetched from elsewhere.
"""
