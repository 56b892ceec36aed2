# Packaging: .deb and .rpm with nfpm (pinned), their lint, and the package
# test under a booted systemd. Included from the Makefile; see
# packaging/README.md.
#
#   make package        dist/meshd_<version>_amd64.deb, dist/meshd-<version>.x86_64.rpm
#   make package-lint   lintian + rpmlint (as nobody when root), systemd-analyze security
#   make package-test   (root) install/upgrade/reload/purge in systemd-nspawn
#
# Same VERSION and SOURCE_DATE_EPOCH give byte-identical packages.

.PHONY: package package-docs package-lint package-test package-deps

NFPM_VERSION := v2.45.2
NFPM ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
DIST ?= dist
PKG_ARCH ?= amd64
PKG_RPM_ARCH := $(if $(filter amd64,$(PKG_ARCH)),x86_64,$(if $(filter arm64,$(PKG_ARCH)),aarch64,$(PKG_ARCH)))
# Staged, generated package inputs (man pages, completion, changelog).
PKGBUILD ?= $(BIN)/pkg
# A package version must start with a digit: "v1.2.3" -> "1.2.3", "dev" ->
# "0.0.0~dev" (sorts before any release); "-" (git describe) becomes "+".
PKG_VERSION ?= $(shell printf '%s' '$(VERSION)' | sed -e 's/^v//' -e 's/^\([^0-9]\)/0.0.0~\1/' -e 's/-/+/g')
# Timestamps inside the packages, man pages and changelog; defaults to the
# last commit's time so that CI rebuilds of one commit are identical.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH

PKG_DEB := $(DIST)/meshd_$(PKG_VERSION)_$(PKG_ARCH).deb
PKG_RPM := $(DIST)/meshd-$(PKG_VERSION).$(PKG_RPM_ARCH).rpm
PKG_MAINTAINER := meshd developers <packaging@meshd.example.org>

package: build package-docs
	@mkdir -p $(DIST)
	rm -f $(PKG_DEB) $(PKG_RPM)
	cp $(BIN)/meshd $(BIN)/meshctl $(PKGBUILD)/
	MESHD_PKGBUILD=$(PKGBUILD) PKG_VERSION=$(PKG_VERSION) PKG_ARCH=$(PKG_ARCH) \
		$(NFPM) package -f $(PKGBUILD)/nfpm-deb.yaml -p deb -t $(PKG_DEB)
	MESHD_PKGBUILD=$(PKGBUILD) PKG_VERSION=$(PKG_VERSION) PKG_ARCH=$(PKG_ARCH) \
		$(NFPM) package -f $(PKGBUILD)/nfpm-rpm.yaml -p rpm -t $(PKG_RPM)
	@cd $(DIST) && sha256sum $(notdir $(PKG_DEB)) $(notdir $(PKG_RPM))

# Man pages and completion from the built meshctl (meshd.yaml.5 from the
# commented config, the same file the packages install); changelog.Debian.gz (a
# deb with a non-native version needs one); gzip -n: no name or time inside.
# The nfpm configs used are nfpm.yaml with one rpm doc entry per man page
# and per document (README.md, docs/*.md: /usr/share/doc/meshd),
# and for rpm an rpm changelog (nfpm's changelog is chglog YAML, which the
# deb gets from changelog.Debian.gz instead).
package-docs: build
	rm -rf $(PKGBUILD) && mkdir -p $(PKGBUILD)/man $(PKGBUILD)/completion
	env -u MESHD_SOCKET $(BIN)/meshctl gen-docs --man $(PKGBUILD)/man --completion $(PKGBUILD)/completion \
		--config-doc packaging/config/meshd.yaml
	gzip -9n $(PKGBUILD)/man/*
	{ printf 'meshd (%s-1) unstable; urgency=medium\n\n' '$(PKG_VERSION)'; \
	  printf '  * Package built from the meshd source tree, version %s.\n\n' '$(VERSION)'; \
	  printf ' -- %s  %s\n' '$(PKG_MAINTAINER)' "$$(date -u -R -d @$(SOURCE_DATE_EPOCH))"; \
	} | gzip -9n > $(PKGBUILD)/changelog.Debian.gz
	cd $(PKGBUILD)/man && for f in *.gz; do s=$${f%.gz}; s=$${s##*.}; \
	  printf '  - src: $${MESHD_PKGBUILD}/man/%s\n    dst: /usr/share/man/man%s/%s\n    expand: true\n    type: doc\n    file_info: {mode: 0644}\n    packager: rpm\n' "$$f" "$$s" "$$f"; \
	done > ../rpm-man.yaml
	for f in README.md docs/*.md; do \
	  printf '  - src: %s\n    dst: /usr/share/doc/meshd/%s\n    type: doc\n    file_info: {mode: 0644}\n    packager: rpm\n' "$$f" "$${f##*/}"; \
	done >> $(PKGBUILD)/rpm-man.yaml
	awk '/# @rpm-man-pages@/ { while ((getline l < "$(PKGBUILD)/rpm-man.yaml") > 0) print l; next } { print }' \
	  nfpm.yaml > $(PKGBUILD)/nfpm-deb.yaml
	core=$$(printf '%s' '$(PKG_VERSION)' | sed -E 's/^([0-9]+(\.[0-9]+){0,2}).*/\1/'); \
	rest=$$(printf '%s' '$(PKG_VERSION)' | cut -c$$(($${#core} + 1))- | sed -E 's/[^0-9A-Za-z.]+/./g; s/^[.]+//; s/[.]+$$//'); \
	printf -- '- semver: %s\n  date: %s\n  packager: %s\n  changes:\n    - note: Package built from the meshd source tree, version %s.\n' \
	  "$$core-$${rest:+$$rest.}1" "$$(date -u -d @$(SOURCE_DATE_EPOCH) +%FT%TZ)" '$(PKG_MAINTAINER)' '$(VERSION)' \
	  > $(PKGBUILD)/changelog.yml
	{ cat $(PKGBUILD)/nfpm-deb.yaml; echo 'changelog: $(PKGBUILD)/changelog.yml'; } > $(PKGBUILD)/nfpm-rpm.yaml

package-deps:
	@./scripts/install-deps-packaging.sh

# lintian must pass with no errors or warnings, rpmlint with no errors, and the
# unit must score at most 2.0 in systemd-analyze security. Both linters run
# as nobody: rpmlint as root would unpack nfpm's absolute cpio paths onto
# this machine (goreleaser/nfpm#1122), and lintian needs no root either.
package-lint: package package-deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  cp $(PKG_DEB) $(PKG_RPM) packaging/rpmlint.toml "$$tmp"/ && chmod -R a+rX "$$tmp" && chmod a+w "$$tmp" && \
	  cd "$$tmp" && nobody() { set -- env -i PATH="$$PATH" HOME="$$tmp" TMPDIR="$$tmp" XDG_CACHE_HOME="$$tmp" "$$@"; \
	    if [ "$$(id -u)" = 0 ]; then runuser -u nobody -- "$$@"; else "$$@"; fi; } && \
	  echo "lintian (as nobody) $(PKG_DEB)" && \
	  nobody lintian --fail-on error,warning --info $(notdir $(PKG_DEB)) && \
	  echo "rpmlint (as nobody) $(PKG_RPM)" && \
	  nobody rpmlint -c rpmlint.toml $(notdir $(PKG_RPM))
	@out=$$(systemd-analyze security --offline=yes --threshold=20 packaging/systemd/meshd.service) || \
	  { echo "$$out"; echo "meshd.service: exposure above 2.0"; exit 1; }; echo "$$out" | tail -1

ROOT_SUITES += package-test
# The Makefile expands root-tests' prerequisites before this file is read,
# so name package-test there too (still only when ROOT_TESTS selects it).
root-tests: $(filter package-test,$(ROOT_TESTS))
package-test: package package-deps
	PKG_DEB=$(PKG_DEB) PKG_RPM=$(PKG_RPM) PKG_VERSION=$(PKG_VERSION) VERSION=$(VERSION) \
		./scripts/package-test.sh
