# tdset-operator: a release build, run from a distroless non-root image (glibc, CA certificates,
# nothing else; time-zone data is compiled in by chrono-tz).
#
#   docker build -t tdset-operator .                     builds the binary in a Rust image
#   cargo build --release --locked --bin tdset-operator && docker build --target prebuilt -t tdset-operator .
#                                                        takes the binary built on the host (a
#                                                        Debian 12 / glibc 2.36 or older host), as
#                                                        the tests do, with buildah, on a real node
# BuildKit (Docker's default builder) and buildah build only the stages the target needs; the
# legacy builder (DOCKER_BUILDKIT=0) builds every stage, `prebuilt` too, which needs the binary.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# The same command scripts/demo.sh runs on the host.
RUN cargo build --release --locked --bin tdset-operator

# What both images run on: the same base, user, port and entrypoint.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tdset-operator"]
CMD ["run"]

FROM runtime AS prebuilt
# The host-built binary: the release build by default. The tests and the demo pass the binary
# the tests were built with (BINARY, from a build context that holds only it), so the test
# command builds the operator once.
ARG BINARY=target/release/tdset-operator
COPY ${BINARY} /usr/local/bin/tdset-operator

FROM runtime
COPY --from=build /src/target/release/tdset-operator /usr/local/bin/tdset-operator
