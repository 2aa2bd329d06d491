<#
.SYNOPSIS
  Build Spec-o3 Desktop for Windows: a one-folder bundle (spec-o3-desktop.exe windowed, spec-o3.exe console),
  a zip, and an installer when Inno Setup is present.

.DESCRIPTION
  The llama.cpp backend is chosen when llama-cpp-python is compiled (CMAKE_ARGS):
    cpu     -DGGML_NATIVE=OFF                    portable x64 code (no -march=native of the build machine)
    cuda    -DGGML_CUDA=on -DGGML_NATIVE=OFF     needs the CUDA Toolkit (CUDA_PATH) + Visual Studio 2022 C++ tools;
                                                 the CUDA runtime DLLs (cudart, cublas, cublasLt) are bundled, the
                                                 user needs only the NVIDIA driver
    vulkan  -DGGML_VULKAN=on -DGGML_NATIVE=OFF   needs the Vulkan SDK (VULKAN_SDK, glslc); the user's GPU driver
                                                 provides vulkan-1.dll
  Build requirements: Python 3.10+ x64 (python.org), Visual Studio 2022 Build Tools with "Desktop development
  with C++" (MSVC, CMake), Git. Run from a "x64 Native Tools" PowerShell so that CMake finds MSVC.
  This script cannot run on the project's Linux build machines; it follows PyInstaller's and
  llama-cpp-python's Windows documentation.

.EXAMPLE
  powershell -ExecutionPolicy Bypass -File packaging\build-windows.ps1 -Backend cuda -RebuildLlama
#>
param(
    [ValidateSet("cpu", "cuda", "vulkan")] [string] $Backend = "cpu",
    [switch] $RebuildLlama,
    [switch] $SkipTest,
    [switch] $RequireGpu,
    [string] $Python = "python"
)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")

$CmakeArgs = @{
    "cpu"    = "-DGGML_NATIVE=OFF"
    "cuda"   = "-DGGML_CUDA=on -DGGML_NATIVE=OFF"
    "vulkan" = "-DGGML_VULKAN=on -DGGML_NATIVE=OFF"
}[$Backend]
if ($Backend -eq "cuda" -and -not $env:CUDA_PATH) { throw "CUDA backend: install the CUDA Toolkit (CUDA_PATH is not set)" }
if ($Backend -eq "vulkan" -and -not $env:VULKAN_SDK) { throw "Vulkan backend: install the Vulkan SDK (VULKAN_SDK is not set)" }

$Venv = ".venv-win"
$Py = Join-Path $Venv "Scripts\python.exe"
if (-not (Test-Path $Py)) { & $Python -m venv $Venv; if ($LASTEXITCODE) { throw "venv failed" } }
& $Py -m pip install -q --upgrade pip

$env:CMAKE_ARGS = $CmakeArgs
Write-Host "== installing Spec-o3 with llama-cpp-python (CMAKE_ARGS='$CmakeArgs'; compiles llama.cpp, minutes)"
& $Py -m pip install -q -e ".[llm,hub,package]"
if ($LASTEXITCODE) { throw "pip install failed" }
$LibDir = & $Py -c "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))"
$Want = @{ "cpu" = "ggml-cpu.dll"; "cuda" = "ggml-cuda.dll"; "vulkan" = "ggml-vulkan.dll" }[$Backend]
if ($RebuildLlama -or -not (Test-Path (Join-Path $LibDir $Want))) {
    Write-Host "== compiling llama-cpp-python for $Backend"
    & $Py -m pip install --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==0.3.36"
    if ($LASTEXITCODE) { throw "llama-cpp-python build failed" }
}
if (-not (Test-Path (Join-Path $LibDir $Want))) { throw "llama-cpp-python has no $Want after the build" }

Write-Host "== icons"
& $Py packaging\icons\render_icons.py
Write-Host "== PyInstaller (one-folder bundle)"
& $Py -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build\pyinstaller packaging\spec-o3.spec
if ($LASTEXITCODE) { throw "PyInstaller failed" }

$Bundle = "dist\spec-o3"
if (-not $SkipTest) {
    Write-Host "== self-test of the bundle (console executable)"
    & "$Bundle\spec-o3.exe" --version
    $gpuArg = @()
    if ($RequireGpu) { $gpuArg = @("--require-gpu") }
    & "$Bundle\spec-o3.exe" self-test @gpuArg --json dist\self-test.json
    if ($LASTEXITCODE) { throw "bundle self-test FAILED (dist\self-test.json)" }
}

$Version = & $Py -c "import sys; sys.path.insert(0, 'packaging'); import bundle_manifest as bm; print(bm.read_version())"
$Zip = "dist\spec-o3-$Version-windows-x64-$Backend.zip"
Write-Host "== zip $Zip"
if (Test-Path $Zip) { Remove-Item $Zip }
Compress-Archive -Path $Bundle -DestinationPath $Zip

$Iscc = Get-Command iscc.exe -ErrorAction SilentlyContinue
if ($Iscc) {
    Write-Host "== installer (Inno Setup)"
    & $Iscc.Source "/DAppVersion=$Version" "/DBackend=$Backend" packaging\windows\spec-o3.iss
    if ($LASTEXITCODE) { throw "Inno Setup failed" }
} else {
    Write-Host "Inno Setup (iscc.exe) not found: skipping the installer; the zip is the portable build"
}
$Size = (Get-ChildItem -Recurse $Bundle | Measure-Object -Property Length -Sum).Sum / 1MB
Write-Host ("== bundle {0}: {1:N0} MiB; {2}: {3:N0} MiB" -f $Bundle, $Size, $Zip, ((Get-Item $Zip).Length / 1MB))
