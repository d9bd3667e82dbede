# Shared by build-image.sh and run.sh (sourced, not run).
# shellcheck shell=bash
vm_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm_cache=${REAPER_CI_CACHE:-$HOME/.cache/reaper-ci}/vm

# The image's recipe: the build script and every file it installs. Any change to these gives a new
# key, so a new image; scenarios and guest/ go on the payload disk and never rebuild the image.
vm_recipe_key() {
  (cd "$vm_dir" && sha256sum build-image.sh image/* | sha256sum | cut -c1-16)
}

vm_image_dir() { printf '%s/%s\n' "$vm_cache" "$(vm_recipe_key)"; }
