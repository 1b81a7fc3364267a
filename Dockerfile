# tdset-operator: a release build in a Rust image, run from a distroless non-root image
# (glibc, CA certificates, nothing else; time-zone data is compiled in by chrono-tz).
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# The same command scripts/demo.sh runs on the host.
RUN cargo build --release --locked --bin tdset-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/tdset-operator /usr/local/bin/tdset-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tdset-operator"]
CMD ["run"]
