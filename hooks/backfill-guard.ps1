# Backfill guard hook for PowerShell: refuses to go on unless the replay plan is complete, approved
# and unchanged. Usage: hooks/backfill-guard.ps1 PLAN_FILE... [--home DIR] (every plan in one run)
# Exit codes are those of `backfill guard`: 0 allowed, 1 refused, 2 unreadable plan or misuse.
param([Parameter(ValueFromRemainingArguments = $true)][string[]]$Rest)
# a plan file first: a changed file named `-h` would print the help (which exits 2 since 0.3)
if (-not $Rest -or $Rest.Count -lt 1 -or $Rest[0].StartsWith("-")) {
    Write-Error "usage: backfill-guard.ps1 PLAN_FILE... [--home DIR] (the first argument a plan file, not an option)"
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
