{{/* Names ----------------------------------------------------------------------------------- */}}

{{- define "vgpu-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name alone when it already contains the chart's name. */}}
{{- define "vgpu-scheduler.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vgpu-scheduler.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "vgpu-scheduler.tlsSecret" -}}
{{- printf "%s-tls" (include "vgpu-scheduler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vgpu-scheduler.webhookName" -}}
{{- printf "%s-webhook" (include "vgpu-scheduler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vgpu-scheduler.selectorLabels" -}}
app.kubernetes.io/component: hami-scheduler
app.kubernetes.io/name: {{ include "vgpu-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vgpu-scheduler.labels" -}}
{{ include "vgpu-scheduler.selectorLabels" . }}
app.kubernetes.io/part-of: vgpu-scheduler
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Switches ------------------------------------------------------------------------------- */}}

{{/* Leader election needs kube-scheduler in the pod: the extender follows kube-scheduler's Lease. */}}
{{- define "vgpu-scheduler.leaderElect" -}}
{{- if and .Values.scheduler.leaderElect .Values.scheduler.kubeScheduler.enabled -}}true{{- end -}}
{{- end -}}

{{- define "vgpu-scheduler.replicas" -}}
{{- if include "vgpu-scheduler.leaderElect" . -}}{{ .Values.scheduler.replicas | int }}{{- else -}}1{{- end -}}
{{- end -}}

{{/* cert-manager when enabled, else our `certs` init container when patch.enabled, else "". */}}
{{- define "vgpu-scheduler.certSource" -}}
{{- if .Values.scheduler.admissionWebhook.enabled -}}
{{- if .Values.scheduler.certManager.enabled -}}cert-manager
{{- else if .Values.scheduler.patch.enabled -}}certs
{{- else -}}secret
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "vgpu-scheduler.httpPort" -}}
{{- .Values.scheduler.service.httpTargetPort | int -}}
{{- end -}}

{{- define "vgpu-scheduler.metricsPort" -}}
{{- last (splitList ":" .Values.scheduler.metricsBindAddress) | int -}}
{{- end -}}

{{/* Images ---------------------------------------------------------------------------------- */}}

{{/* dict "image" <image values> "global" .Values.global "tag" <default tag> */}}
{{- define "vgpu-scheduler.image" -}}
{{- $registry := default .image.registry .global.imageRegistry -}}
{{- $tag := default .tag .image.tag | toString | trim -}}
{{- if $registry -}}{{ $registry }}/{{- end -}}{{ .image.repository }}:{{ $tag }}
{{- end -}}

{{/* The cluster's version without build suffixes: v1.31.1+k3s1 -> v1.31.1, v1.30.8-eks-2d5f260 -> v1.30.8. */}}
{{- define "vgpu-scheduler.kubeVersionTag" -}}
{{- regexReplaceAll "^(v[0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "${1}" -}}
{{- end -}}

{{- define "vgpu-scheduler.pullSecrets" -}}
{{- $secrets := concat .Values.global.imagePullSecrets .Values.scheduler.extender.image.pullSecrets -}}
{{- if .Values.scheduler.kubeScheduler.enabled -}}
{{- $secrets = concat $secrets .Values.scheduler.kubeScheduler.image.pullSecrets -}}
{{- end -}}
{{- range uniq $secrets }}
- name: {{ . }}
{{- end -}}
{{- end -}}

{{/* Device config -------------------------------------------------------------------------- */}}

{{/* The device config's sections in the registry's order, each with the devices.<vendor> switch
that enables it ("" = always on). Written by scripts/chart-sections from the vendor registry
(src/vgpu_scheduler/devices/registry.py): do not edit by hand. */}}
{{- define "vgpu-scheduler.sections" -}}
- {section: nvidia, vendor: ""}
- {section: cambricon, vendor: cambricon}
- {section: hygon, vendor: hygon}
- {section: enflame, vendor: enflame}
- {section: mthreads, vendor: mthreads}
- {section: metax, vendor: metax}
- {section: kunlun, vendor: kunlun}
- {section: awsneuron, vendor: awsneuron}
- {section: amd, vendor: amd}
- {section: vastai, vendor: vastai}
- {section: biren, vendor: biren}
- {section: vnpus, vendor: ascend}
- {section: iluvatars, vendor: iluvatar}
{{- end -}}

{{/* "true" when devices.<vendor>.enabled (dict "root" $ "vendor" <name>); NVIDIA ("") always. */}}
{{- define "vgpu-scheduler.vendorEnabled" -}}
{{- if or (not .vendor) (dig .vendor "enabled" false .root.Values.devices) -}}true{{- end -}}
{{- end -}}

{{/* Every section, before the switches: device-config.content, or the one built from the values
(HAMi's chart defaults, as src/vgpu_scheduler/data/device-config.yaml). */}}
{{- define "vgpu-scheduler.deviceConfigSource" -}}
{{- $override := index .Values "device-config" | default dict -}}
{{- if $override.content -}}
{{ $override.content }}
{{- else -}}
{{ include "vgpu-scheduler.deviceConfigBuiltin" . }}
{{- end -}}
{{- end -}}

{{- define "vgpu-scheduler.deviceConfigBuiltin" -}}
nvidia:
  resourceCountName: {{ .Values.resourceName | quote }}
  resourceMemoryName: {{ .Values.resourceMem | quote }}
  resourceMemoryPercentageName: {{ .Values.resourceMemPercentage | quote }}
  resourceCoreName: {{ .Values.resourceCores | quote }}
  resourcePriorityName: {{ .Values.resourcePriority | quote }}
  overwriteEnv: {{ .Values.scheduler.overwriteEnv | default "false" }}
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: {{ .Values.devicePlugin.preConfiguredDeviceMemory | default 0 }}
  memoryFactor: 1
  deviceSplitCount: {{ .Values.devicePlugin.deviceSplitCount }}
  deviceMemoryScaling: {{ .Values.devicePlugin.deviceMemoryScaling }}
  deviceCoreScaling: {{ .Values.devicePlugin.deviceCoreScaling }}
  enableNumaTopology: {{ .Values.devicePlugin.enableNumaTopology | default false }}
  gpuCorePolicy: {{ .Values.devices.nvidia.gpuCorePolicy | quote }}
  libCudaLogLevel: {{ .Values.devices.nvidia.libCudaLogLevel }}
  runtimeClassName: {{ .Values.devicePlugin.runtimeClassName | quote }}
  migProfileAllowlist:
  - {models: ["A30"], profiles: ["1g.6gb", "2g.12gb", "4g.24gb"]}
  - {models: ["A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"], profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]}
  - {models: ["A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"], profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb"]}
  - {models: ["H100-PCIE-80GB", "H100-SXM5-80GB"], profiles: ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]}
  - {models: ["H100-PCIE-94GB", "H100-SXM5-94GB"], profiles: ["1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb"]}
  - {models: ["H20", "H100 on GH200"], profiles: ["1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb"]}
  - {models: ["H200 NVL", "H200-SXM5"], profiles: ["1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"]}
  - {models: ["B200"], profiles: ["1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb"]}
  - {models: ["RTX PRO 6000 Blackwell Server Edition"], profiles: ["1g.24gb", "2g.48gb", "4g.96gb"]}
cambricon:
  resourceCountName: {{ .Values.mluResourceName | quote }}
  resourceMemoryName: {{ .Values.mluResourceMem | quote }}
  resourceCoreName: {{ .Values.mluResourceCores | quote }}
hygon:
  resourceCountName: {{ .Values.dcuResourceName | quote }}
  resourceMemoryName: {{ .Values.dcuResourceMem | quote }}
  resourceCoreName: {{ .Values.dcuResourceCores | quote }}
  memoryFactor: 1
metax:
  resourceCountName: "metax-tech.com/gpu"
  resourceVCountName: {{ .Values.metaxResourceName | quote }}
  resourceVMemoryName: {{ .Values.metaxResourceMem | quote }}
  resourceVCoreName: {{ .Values.metaxResourceCore | quote }}
  sgpuTopologyAware: {{ .Values.metaxsGPUTopologyAware }}
enflame:
  resourceNameGCU: "enflame.com/gcu"
  resourceNameDRSGCU: {{ .Values.enflameResourceNameDRSGCU | quote }}
  resourceNameGCUMemory: {{ .Values.enflameResourceNameGCUMemory | quote }}
  resourceNameGCUCore: {{ .Values.enflameResourceNameGCUCore | quote }}
mthreads:
  resourceCountName: "mthreads.com/vgpu"
  resourceMemoryName: "mthreads.com/sgpu-memory"
  resourceCoreName: "mthreads.com/sgpu-core"
iluvatars:
{{- range $chip := list "MR-V100" "MR-V50" "BI-V150" "BI-V100" }}
- chipName: {{ $chip }}
  commonWord: {{ $chip }}
  resourceCountName: iluvatar.ai/{{ $chip }}-vgpu
  resourceMemoryName: iluvatar.ai/{{ $chip }}.vMem
  resourceCoreName: iluvatar.ai/{{ $chip }}.vCore
{{- end }}
kunlun:
  resourceCountName: {{ .Values.kunlunResourceName | quote }}
  resourceVCountName: {{ .Values.kunlunResourceVCountName | quote }}
  resourceVMemoryName: {{ .Values.kunlunResourceVMemoryName | quote }}
awsneuron:
  resourceCountName: "aws.amazon.com/neuron"
  resourceCoreName: "aws.amazon.com/neuroncore"
amd:
  resourceCountName: "amd.com/gpu"
  resourceCoreName: "amd.com/gpucores"
  resourceMemoryName: "amd.com/gpumem"
vastai:
  resourceCountName: {{ .Values.vastaiResourceName | quote }}
biren:
  resourceCountName: {{ .Values.birenResourceName | quote }}
vnpus:
  hamiVnpuCore: {{ .Values.devices.ascend.hamiVnpuCore | default false }}
  configs:
{{- $rc := .Values.devices.ascend.runtimeClassName | default "" | quote }}
{{- $ow := .Values.scheduler.overwriteEnv | default "false" }}
  - chipName: 910A
    commonWord: Ascend910A
    resourceName: huawei.com/Ascend910A
    resourceMemoryName: huawei.com/Ascend910A-memory
    resourceCoreName: huawei.com/Ascend910A-core
    memoryAllocatable: 32768
    memoryCapacity: 32768
    memoryFactor: 1
    aiCore: 30
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir02, memory: 2184, aiCore: 2}
    - {name: vir04, memory: 4369, aiCore: 4}
    - {name: vir08, memory: 8738, aiCore: 8}
    - {name: vir16, memory: 17476, aiCore: 16}
  - chipName: 910B2
    commonWord: Ascend910B2
    resourceName: huawei.com/Ascend910B2
    resourceMemoryName: huawei.com/Ascend910B2-memory
    resourceCoreName: huawei.com/Ascend910B2-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 24
    aiCPU: 6
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir03_1c_8g, memory: 8192, aiCore: 3, aiCPU: 1}
    - {name: vir06_1c_16g, memory: 16384, aiCore: 6, aiCPU: 1}
    - {name: vir12_3c_32g, memory: 32768, aiCore: 12, aiCPU: 3}
  - chipName: 910B3
    commonWord: Ascend910B3
    resourceName: huawei.com/Ascend910B3
    resourceMemoryName: huawei.com/Ascend910B3-memory
    resourceCoreName: huawei.com/Ascend910B3-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
  - chipName: 910B4-1
    commonWord: Ascend910B4-1
    resourceName: huawei.com/Ascend910B4-1
    resourceMemoryName: huawei.com/Ascend910B4-1-memory
    resourceCoreName: huawei.com/Ascend910B4-1-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
  - chipName: 910B4
    commonWord: Ascend910B4
    resourceName: huawei.com/Ascend910B4
    resourceMemoryName: huawei.com/Ascend910B4-memory
    resourceCoreName: huawei.com/Ascend910B4-core
    memoryAllocatable: 32768
    memoryCapacity: 32768
    memoryFactor: 1
    aiCore: 20
    aiCPU: 7
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir05_1c_8g, memory: 8192, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_16g, memory: 16384, aiCore: 10, aiCPU: 3}
  - chipName: 310P3
    commonWord: Ascend310P
    resourceName: huawei.com/Ascend310P
    resourceMemoryName: huawei.com/Ascend310P-memory
    resourceCoreName: huawei.com/Ascend310P-core
    memoryAllocatable: 21527
    memoryCapacity: 24576
    memoryFactor: 1
    aiCore: 8
    aiCPU: 7
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    templates:
    - {name: vir01, memory: 3072, aiCore: 1, aiCPU: 1}
    - {name: vir02, memory: 6144, aiCore: 2, aiCPU: 2}
    - {name: vir04, memory: 12288, aiCore: 4, aiCPU: 4}
  - chipName: Ascend910
    commonWord: Ascend910C
    resourceName: huawei.com/Ascend910C
    resourceMemoryName: huawei.com/Ascend910C-memory
    resourceCoreName: huawei.com/Ascend910C-core
    memoryAllocatable: 65536
    memoryCapacity: 65536
    aiCore: 20
    aiCPU: 7
    runtimeClassName: {{ $rc }}
    overwriteEnv: {{ $ow }}
    superPod: true
    templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
{{- end -}}

{{/* The device config the extender reads: the sections of enabled vendors only. An unknown
section fails the render (the extender would refuse the file). */}}
{{- define "vgpu-scheduler.deviceConfig" -}}
{{- $all := include "vgpu-scheduler.deviceConfigSource" . | fromYaml -}}
{{- if hasKey $all "Error" -}}
{{- fail (printf "device-config.content is not a YAML mapping: %s" (get $all "Error")) -}}
{{- end -}}
{{- if (index .Values "device-config" | default dict).content -}}
{{/* The extender gives the resource names an nvidia section omits their defaults: write the
values' names there, so the file says which names the extender uses. */}}
{{- $builtin := include "vgpu-scheduler.deviceConfigBuiltin" . | fromYaml -}}
{{- $names := pick $builtin.nvidia "resourceCountName" "resourceMemoryName" "resourceMemoryPercentageName" "resourceCoreName" "resourcePriorityName" -}}
{{- $_ := set $all "nvidia" (merge (get $all "nvidia" | default dict) $names) -}}
{{- end -}}
{{- $known := list -}}
{{- range $s := include "vgpu-scheduler.sections" . | fromYamlArray -}}
{{- $known = append $known $s.section -}}
{{- if and (hasKey $all $s.section) (include "vgpu-scheduler.vendorEnabled" (dict "root" $ "vendor" $s.vendor)) }}
{{ $s.section }}:
{{- index $all $s.section | toYaml | nindent 2 }}
{{- end -}}
{{- end -}}
{{- range $section, $_ := $all -}}
{{- if not (has $section $known) -}}
{{- fail (printf "device-config.content: unknown section %q (known: %s)" $section (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* kube-scheduler's extender managedResources: the resource names the extender's vendors own
with this device config and these flags (tests/deploy/test_chart.py asks the extender's own code).
That is every resource*Name* key of the sections in the device config (so of enabled vendors),
except:
- Moore Threads: only its count (kube-scheduler checks sGPU memory and cores itself);
- Enflame: its DRS, memory and core names default to enflame.com/drs-gcu, gcu-memory and gcu-core
  when the section does not name them, even without the section (HAMi's extender registers them
  whatever the config says), so they are always managed; the section adds the GCU count. */}}
{{- define "vgpu-scheduler.managedResources" -}}
{{- $cfg := include "vgpu-scheduler.deviceConfig" . | fromYaml -}}
{{- $names := list -}}
{{- range $s := include "vgpu-scheduler.sections" . | fromYamlArray -}}
{{- $body := index $cfg $s.section -}}
{{- if eq $s.section "enflame" -}}
{{- $e := $body | default dict -}}
{{- if $e.resourceNameGCU -}}{{- $names = append $names $e.resourceNameGCU -}}{{- end -}}
{{- $names = append $names ($e.resourceNameDRSGCU | default $e.resourceNameVGCU | default "enflame.com/drs-gcu") -}}
{{- $names = append $names ($e.resourceNameGCUMemory | default "enflame.com/gcu-memory") -}}
{{- $names = append $names ($e.resourceNameGCUCore | default "enflame.com/gcu-core") -}}
{{- $body = dict -}}
{{- end -}}
{{- $entries := list -}}
{{- if kindIs "slice" $body -}}
{{- $entries = $body -}}
{{- else if kindIs "map" $body -}}
{{- $entries = list $body -}}
{{- if kindIs "slice" $body.configs -}}{{- $entries = concat $entries $body.configs -}}{{- end -}}
{{- end -}}
{{- range $e := $entries -}}
{{- if kindIs "map" $e -}}
{{- range $k, $v := $e -}}
{{- $wanted := regexMatch "^resource.*Name" $k -}}
{{- if eq $s.section "mthreads" -}}{{- $wanted = eq $k "resourceCountName" -}}{{- end -}}
{{- if and $wanted (kindIs "string" $v) $v -}}
{{- $names = append $names $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range uniq $names }}
- {name: {{ . | quote }}, ignoredByScheduler: true}
{{- end -}}
{{- end -}}
