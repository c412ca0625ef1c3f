@echo off
rem Cairn - Windows Startup entry, written by `cairn autostart enable` (template: packaging/autostart/cairn.cmd).
rem Installed as %APPDATA%\Microsoft\Windows\Start Menu\Programs\Startup\Cairn ID.cmd (one per vault); Windows runs it at login.
${environment}start "Cairn" ${command}
