"""Write-audit-publish: the pause, the publish rule, and notifying downstream owners."""
