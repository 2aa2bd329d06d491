; Inno Setup script for Spec-o3 Desktop (per-user install, no administrator rights needed).
; Built by packaging\build-windows.ps1:  iscc /DAppVersion=0.1.0 /DBackend=cuda packaging\windows\spec-o3.iss
; Models, settings and caches live in the user's folders (%LOCALAPPDATA%\spec-o3) and are not removed by the
; uninstaller, so a reinstall finds its models again.
#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef Backend
  #define Backend "cpu"
#endif

[Setup]
AppId={{6E0B7F0C-3C0D-4C57-9C1E-5EC0D3A70001}
AppName=Spec-o3 Desktop
AppVersion={#AppVersion}
AppPublisher=Spec-o3 Desktop contributors
DefaultDirName={localappdata}\Programs\Spec-o3
DefaultGroupName=Spec-o3 Desktop
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=Spec-o3-{#AppVersion}-windows-x64-{#Backend}-setup
SetupIconFile=..\icons\spec-o3.ico
UninstallDisplayIcon={app}\spec-o3-desktop.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
ChangesEnvironment=yes

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked
Name: "addtopath"; Description: "Add the spec-o3 command line to PATH"; Flags: unchecked

[Files]
Source: "..\..\dist\spec-o3\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Spec-o3 Desktop"; Filename: "{app}\spec-o3-desktop.exe"
Name: "{group}\Spec-o3 self-test"; Filename: "{cmd}"; Parameters: "/k ""{app}\spec-o3.exe"" self-test"
Name: "{group}\Uninstall Spec-o3 Desktop"; Filename: "{uninstallexe}"
Name: "{autodesktop}\Spec-o3 Desktop"; Filename: "{app}\spec-o3-desktop.exe"; Tasks: desktopicon

[Registry]
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; \
  Tasks: addtopath; Check: NeedsAddPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\spec-o3-desktop.exe"; Description: "Start Spec-o3 Desktop"; Flags: nowait postinstall skipifsilent

[Code]
function NeedsAddPath(Dir: string): Boolean;
var
  Path: string;
begin
  if not RegQueryStringValue(HKCU, 'Environment', 'Path', Path) then
    Path := '';
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Path) + ';') = 0;
end;
