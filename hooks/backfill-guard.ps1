# Backfill guard hook for PowerShell: refuses to go on unless the replay plan is complete, approved
# and unchanged. Usage: hooks/backfill-guard.ps1 PLAN_FILE [--home DIR]
# Exit codes are those of `backfill guard`: 0 allowed, 1 refused, 2 unreadable plan or misuse.
param([Parameter(ValueFromRemainingArguments = $true)][string[]]$Rest)
if (-not $Rest -or $Rest.Count -lt 1) {
    Write-Error "usage: backfill-guard.ps1 PLAN_FILE [--home DIR]"
    exit 2
}
$root = Split-Path -Parent $PSScriptRoot
$candidates = @(
    (Get-Command backfill -ErrorAction SilentlyContinue | Select-Object -ExpandProperty Source),
    (Join-Path $root ".venv/bin/backfill"),
    (Join-Path $root ".venv/Scripts/backfill.exe")
) | Where-Object { $_ -and (Test-Path $_) }
if (-not $candidates) {
    Write-Error "backfill-guard: the backfill command is not installed; run 'make test' once"
    exit 2
}
& $candidates[0] guard @Rest
exit $LASTEXITCODE
