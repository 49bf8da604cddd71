"""Write-audit-publish: the freeze, the publish rule, and notifying downstream owners."""
