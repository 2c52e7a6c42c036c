"""Every configuration key of circle-reid, with its default and a one-line comment.

This file is the single source of truth for the configuration schema: YAML files and
command-line overrides may only set keys that exist here, with values of the same type.
`docs/configs.md` is generated from this file (``python tools/gen_config_docs.py``).

Conventions:
* A scale or margin of ``-1`` means "the head's published default" (see HEAD_DEFAULTS in
  ``reid/modeling/heads``), so that switching ``MODEL.HEADS.NAME`` never silently keeps a
  margin tuned for another head.
* Sizes are ``[height, width]`` in pixels; epoch-based schedule keys count whole passes over the training set.
"""
from yacs.config import CfgNode as CN

_C = CN()

# ---- Top level -----------------------------------------------------------------
# Seed for Python, NumPy and torch RNGs and for the samplers; makes a run repeatable.
_C.SEED = 0
# Folder that receives everything a run writes: config.yaml, log.txt, metrics.jsonl, checkpoints.
_C.OUTPUT_DIR = "output"
# Deterministic CUDA kernels (cuDNN, torch.use_deterministic_algorithms): slower, for exact repeatability.
_C.CUDNN_DETERMINISTIC = False

# ---- Model ---------------------------------------------------------------------
_C.MODEL = CN()
# Meta architecture: "baseline" (global feature + BNNeck), "mgn" (multi-granularity parts), "transreid" (ViT + JPM) or "clipreid" (a CLIP encoder's feature and projection, a BNNeck and head each).
_C.MODEL.META_ARCHITECTURE = "baseline"
# Where to run: "auto" (CUDA when present, else CPU), "cpu", "cuda" or "cuda:N".
_C.MODEL.DEVICE = "auto"
# Checkpoint (.pth) to load before training or testing; empty = none.
_C.MODEL.WEIGHTS = ""
# Per-channel RGB mean subtracted inside the model; inputs are raw pixels in 0-255.
_C.MODEL.PIXEL_MEAN = [123.675, 116.28, 103.53]
# Per-channel RGB std dividing inside the model (ImageNet statistics scaled to 0-255).
_C.MODEL.PIXEL_STD = [58.395, 57.12, 57.375]
# Convert BatchNorm to SyncBatchNorm when training with several processes.
_C.MODEL.SYNC_BN = False

_C.MODEL.BACKBONE = CN()
# Backbone: "resnet18/34/50/101/152", "resnet*_ibn_a" (IBN-Net), "osnet_x1_0/x0_75/x0_5/x0_25", "osnet_ibn_x1_0", "osnet_ain_*", "vit_base_transreid", "vit_small_transreid", "clip_vit_b16", "clip_rn50" (CLIP's image encoders, needs open_clip), "timm/<timm model name>".
_C.MODEL.BACKBONE.NAME = "resnet50"
# ResNet: stride of the last stage (conv5); 1 doubles the final feature map as in BoT/MGN (OSNet: always stride 16).
_C.MODEL.BACKBONE.LAST_STRIDE = 1
# Start from ImageNet weights (downloaded once, or PRETRAINED_PATH when set).
_C.MODEL.BACKBONE.PRETRAINED = True
# Local ImageNet weights used instead of downloading: torchvision's; IBN-Net authors' for *_ibn_a; torchreid's for osnet_*; timm's (.pth/.safetensors) for timm/*; OpenAI's CLIP file (ViT-B-16.pt, RN50.pt) for clip_*.
_C.MODEL.BACKBONE.PRETRAINED_PATH = ""
# TransReID ViTs: [rows, cols] of the pretrained file's position grid; [] takes a square (ImageNet) or 2:1 (person images at 256x128) grid from its length; e.g. [18, 8] for 288x128.
_C.MODEL.BACKBONE.PRETRAINED_GRID = []
# ResNet: max pool after conv1: "pad" (torchvision: 3x3/2, padding 1) or "ceil" (fast-reid: no padding, ceil mode).
_C.MODEL.BACKBONE.STEM_POOL = "pad"
# Non-local blocks (Wang et al. 2018) after the last N residual blocks of each of the 4 stages; fast-reid SBS: [0, 2, 3, 0].
_C.MODEL.BACKBONE.NON_LOCAL = [0, 0, 0, 0]
# Embedding channels of each non-local block; 0 = half its input channels (the paper), fast-reid uses 1.
_C.MODEL.BACKBONE.NON_LOCAL_EMBED = 0
# timm ViT-style backbones: feature from the tokens: "cls" (class token) or "patches" (patch-token grid, pooled by MODEL.HEADS.POOLING).
_C.MODEL.BACKBONE.TOKEN_FEATURE = "cls"
# Stochastic depth (drop path) rate of transformer backbones; 0 = off (TransReID: 0.1).
_C.MODEL.BACKBONE.DROP_PATH = 0.0

_C.MODEL.TRANSREID = CN()
# vit_*_transreid: stride [y, x] of the overlapping 16x16 patch embedding; 16 = no overlap (TransReID: 12).
_C.MODEL.TRANSREID.STRIDE_SIZE = [16, 16]
# SIE: a learned embedding per camera added to the ViT's tokens; needs camera ids in the data.
_C.MODEL.TRANSREID.SIE_CAMERA = False
# SIE coefficient lambda scaling the camera embedding (TransReID: 3.0).
_C.MODEL.TRANSREID.SIE_COEF = 3.0
# Cameras of the SIE embedding; 0 = set by tools/train.py from the training data (largest camera id + 1).
_C.MODEL.TRANSREID.NUM_CAMERAS = 0
# JPM (meta architecture "transreid"): shift the patch sequence by this many patches before shuffling.
_C.MODEL.TRANSREID.JPM_SHIFT = 5
# JPM: number of groups of the patch shuffle.
_C.MODEL.TRANSREID.JPM_GROUPS = 2
# JPM: local branches k, each on 1/k of the (shuffled) patches with its own BNNeck and identity head.
_C.MODEL.TRANSREID.JPM_PARTS = 4
# JPM: shift and shuffle the patches before splitting (False: consecutive stripes of patches).
_C.MODEL.TRANSREID.JPM_REARRANGE = True

# CLIP's image encoders (clip_*); defaults equal TRANSREID's, so runs of the previous layout (which set those) load alike.
_C.MODEL.CLIP = CN()
# clip_vit_b16: stride [y, x] of the overlapping 16x16 patch embedding; 16 = no overlap (CLIP-ReID's SIE-OLP: 12).
_C.MODEL.CLIP.STRIDE_SIZE = [16, 16]
# clip_vit_b16: SIE, a learned embedding per camera added to the class token; needs camera ids in the data.
_C.MODEL.CLIP.SIE_CAMERA = False
# SIE coefficient lambda (CLIP-ReID's released SIE models: 1.0, set by configs/Base-clipreid.yml).
_C.MODEL.CLIP.SIE_COEF = 3.0
# Cameras of the SIE embedding; 0 = set by tools/train.py from the training data (largest camera id + 1).
_C.MODEL.CLIP.NUM_CAMERAS = 0

_C.MODEL.CLIPREID = CN()
# clipreid: CLIP-ReID's two stages: first learn a text prompt per identity with the encoders frozen, then train the image encoder with the image-to-text loss too (False: its baseline, one stage).
_C.MODEL.CLIPREID.PROMPT_LEARNING = False
# Prompt template of the first stage; its run of X words is replaced by each identity's learned tokens (CLIP-ReID: 4; vehicles: "A photo of a X X X X vehicle.").
_C.MODEL.CLIPREID.PROMPT = "A photo of a X X X X person."
# Weight of the second stage's image-to-text cross entropy (its projection against every identity's text feature; CLIP-ReID's I2T_LOSS_WEIGHT).
_C.MODEL.CLIPREID.I2T_WEIGHT = 1.0

_C.MODEL.VIDEO = CN()
# Video re-ID: a clip [B, T, 3, H, W] (a tracklet's frames) becomes one feature by pooling its frames' features before the neck: "avg", "max" or "attention" (learned frame weights, Gao & Nevatia 2018); images are unaffected.
_C.MODEL.VIDEO.TEMPORAL = "avg"

_C.MODEL.HEADS = CN()
# Identity head: "linear", "normface", "amsoftmax", "arcface", "circle" or "curricularface".
_C.MODEL.HEADS.NAME = "circle"
# Number of training identities; set automatically from the training data (0 = no identity head).
_C.MODEL.HEADS.NUM_CLASSES = 0
# Logit scale s (gamma for Circle); -1 = the head's published default (circle 128, others 64).
_C.MODEL.HEADS.SCALE = -1.0
# Margin m; -1 = the head's published default (circle 0.25, amsoftmax 0.35, arcface 0.5, ...).
_C.MODEL.HEADS.MARGIN = -1.0
# ArcFace/CurricularFace: use the "easy margin" variant (no margin when cos theta < 0).
_C.MODEL.HEADS.EASY_MARGIN = False
# CurricularFace: momentum of the moving average t of the mean positive cosine.
_C.MODEL.HEADS.CURRICULAR_MOMENTUM = 0.99
# Global pooling of the last feature map: "avg", "max", "gem" (learnable p) or "gem_fixed" (p fixed at GEM_P: fast-reid's GeneralizedMeanPooling).
_C.MODEL.HEADS.POOLING = "avg"
# GeM pooling exponent p (gem: initial value of the learnable p; gem_fixed: the fixed p).
_C.MODEL.HEADS.GEM_P = 3.0
# Width of a Linear + BatchNorm1d + ReLU embedding after pooling (torchreid's OSNet "fc": 512); 0 = none.
_C.MODEL.HEADS.FC_DIM = 0
# Linear head only: add a bias to the logits (torchreid's classifier has one).
_C.MODEL.HEADS.BIAS = False
# Neck between pooling and head: "bnneck" (BatchNorm with frozen bias) or "none".
_C.MODEL.HEADS.NECK = "bnneck"
# Feature returned in eval mode: "after" the BNNeck (post-BN) or "before" it (pre-BN).
_C.MODEL.HEADS.NECK_FEAT = "after"

_C.MODEL.MGN = CN()
# Width of each of the 8 reduced MGN features (output of MODEL.MGN.REDUCTION).
_C.MODEL.MGN.REDUCTION_DIM = 256
# Whether the global branch down-samples in conv5 (stride 2) as in the MGN paper.
_C.MODEL.MGN.GLOBAL_DOWNSAMPLE = True
# Loss layout: "concat" (Circle paper: one head on all 8 features concatenated) or
# "per_branch" (original MGN: a head on each of the 8 features + triplet on the 3 globals).
_C.MODEL.MGN.LOSS_LAYOUT = "concat"
# Pooling of each of the 8 MGN features: "max" (MGN paper), "avg" or "gem" (one learnable p each; fast-reid).
_C.MODEL.MGN.POOLING = "max"
# Stripe rows: "overlap" (adaptive bins, neighbours share a row when H % parts != 0) or "chunk" (torch.chunk; fast-reid).
_C.MODEL.MGN.STRIPES = "overlap"
# Reduction of each pooled feature: "conv_bn_relu" (MGN paper) or "conv" (1x1 conv only; fast-reid v1.x, the neck is its BN).
_C.MODEL.MGN.REDUCTION = "conv_bn_relu"

_C.MODEL.LOSSES = CN()
# Losses to optimise: any of "identity" (the head), "triplet", "pair_circle".
_C.MODEL.LOSSES.NAMES = ["identity"]

_C.MODEL.LOSSES.ID = CN()
# Weight of the identity (head) cross-entropy loss.
_C.MODEL.LOSSES.ID.WEIGHT = 1.0
# Label smoothing epsilon; 0 = off (keep off for margin heads: it changes their objective).
_C.MODEL.LOSSES.ID.LABEL_SMOOTH = 0.0

_C.MODEL.LOSSES.TRIPLET = CN()
# Weight of the batch-hard triplet loss.
_C.MODEL.LOSSES.TRIPLET.WEIGHT = 1.0
# Triplet margin; ignored when SOFT_MARGIN is on.
_C.MODEL.LOSSES.TRIPLET.MARGIN = 0.3
# Use the soft-margin form log(1 + exp(d_ap - d_an)) instead of a hinge.
_C.MODEL.LOSSES.TRIPLET.SOFT_MARGIN = False
# Distance for mining and loss: "euclidean" or "cosine".
_C.MODEL.LOSSES.TRIPLET.METRIC = "euclidean"
# Feature the triplet loss sees: "before" (pre-BN, as in BoT) or "after" the BNNeck.
_C.MODEL.LOSSES.TRIPLET.FEAT = "before"

_C.MODEL.LOSSES.PAIR_CIRCLE = CN()
# Weight of the pair-wise Circle loss.
_C.MODEL.LOSSES.PAIR_CIRCLE.WEIGHT = 1.0
# Pair-wise Circle scale gamma (paper's pair-wise setting: 80).
_C.MODEL.LOSSES.PAIR_CIRCLE.GAMMA = 80.0
# Pair-wise Circle relaxation margin m (paper's pair-wise setting: 0.4).
_C.MODEL.LOSSES.PAIR_CIRCLE.MARGIN = 0.4
# Feature the pair-wise Circle loss sees: "before" or "after" the BNNeck.
_C.MODEL.LOSSES.PAIR_CIRCLE.FEAT = "after"

# ---- Input ---------------------------------------------------------------------
_C.INPUT = CN()
# Training image size [height, width].
_C.INPUT.SIZE_TRAIN = [256, 128]
# Test image size [height, width].
_C.INPUT.SIZE_TEST = [256, 128]
# Resizing filter: "cv2" (OpenCV bilinear; area when shrinking >2x) or "pil_bilinear" (Pillow's, as torchreid).
_C.INPUT.INTERPOLATION = "cv2"
# Probability of a random horizontal flip during training.
_C.INPUT.FLIP_PROB = 0.5
# Zero-padding (pixels) before the random crop back to SIZE_TRAIN; 0 = no pad/crop.
_C.INPUT.PADDING = 10

_C.INPUT.REA = CN()
# Random erasing (Zhong et al. 2020) on or off.
_C.INPUT.REA.ENABLED = True
# Probability of erasing one rectangle in an image.
_C.INPUT.REA.PROB = 0.5
# Range of the erased area as a fraction of the image area.
_C.INPUT.REA.AREA = [0.02, 0.4]
# Minimum aspect ratio of the erased rectangle (the maximum is its inverse).
_C.INPUT.REA.MIN_RATIO = 0.3
# Fill of the erased rectangle: "mean" (MODEL.PIXEL_MEAN, as BoT/fast-reid) or "random" (uniform uint8 noise).
_C.INPUT.REA.FILL = "mean"

_C.INPUT.CJ = CN()
# Colour jitter on or off (off by default: clothing colour is identity evidence).
_C.INPUT.CJ.ENABLED = False
# Probability of applying colour jitter to an image.
_C.INPUT.CJ.PROB = 0.5
# Maximum relative brightness change.
_C.INPUT.CJ.BRIGHTNESS = 0.15
# Maximum relative contrast change.
_C.INPUT.CJ.CONTRAST = 0.15
# Maximum relative saturation change.
_C.INPUT.CJ.SATURATION = 0.1
# Maximum hue shift (fraction of the hue circle).
_C.INPUT.CJ.HUE = 0.1

# ---- Datasets ------------------------------------------------------------------
_C.DATASETS = CN()
# Training datasets (their identities are combined and relabelled 0..C-1).
_C.DATASETS.NAMES = ["market1501"]
# Test datasets, each evaluated on its own query/gallery split.
_C.DATASETS.TESTS = ["market1501"]
# Root folder that holds the dataset folders (see datasets/README.md).
_C.DATASETS.ROOT = "datasets"
# On a corrupt or unreadable image: False = stop with an error naming the file, True = skip and count it.
_C.DATASETS.SKIP_CORRUPT = False
# MSMT17: train on list_train + list_val (32,621 images, the usual protocol) instead of list_train only.
_C.DATASETS.MSMT17_COMBINE_VAL = True
# MSMT17 release: "auto" (V1 if present, else V2), "v1" (train/test) or "v2" (mask_train_v2/mask_test_v2).
_C.DATASETS.MSMT17_VERSION = "auto"
# Train on every image of each DATASETS.NAMES dataset: train + query + gallery ids, one label space (see docs/datasets.md).
_C.DATASETS.COMBINE_ALL = False

_C.DATASETS.CUHK03 = CN()
# CUHK03 image set: "detected" (pedestrian-detector boxes) or "labeled" (hand-drawn boxes).
_C.DATASETS.CUHK03.IMAGE_SET = "detected"
# CUHK03 protocol: "new" (767/700 identities, needs the new-protocol split file) or "classic" (1,367/100).
_C.DATASETS.CUHK03.PROTOCOL = "new"
# CUHK03 classic protocol: which of the 20 test splits of cuhk-03.mat, 0..19.
_C.DATASETS.CUHK03.CLASSIC_SPLIT = 0

_C.DATASETS.CUSTOM = CN()
# Custom dataset: text/CSV list "path pid camid" for training (paths relative to the list's folder).
_C.DATASETS.CUSTOM.TRAIN_LIST = ""
# Custom dataset: list file of query images.
_C.DATASETS.CUSTOM.QUERY_LIST = ""
# Custom dataset: list file of gallery images.
_C.DATASETS.CUSTOM.GALLERY_LIST = ""

_C.DATASETS.FOLDERS = CN()
# Test set "folders": query folder of identity sub-folders, or list file "path identity [camid]" (tools/test.py --query).
_C.DATASETS.FOLDERS.QUERY_PATH = ""
# Test set "folders": gallery folder of identity sub-folders, or list file "path identity [camid]" (tools/test.py --gallery).
_C.DATASETS.FOLDERS.GALLERY_PATH = ""
_C.DATASETS.UNLABELLED = CN()
# Unlabelled crops (dataset "unlabelled", learning without labels): a folder of images, searched recursively.
_C.DATASETS.UNLABELLED.DIR = ""
# Unlabelled crops: a list file instead, one image per line, "path" or "path camid" (relative to the list's folder).
_C.DATASETS.UNLABELLED.LIST = ""
# Unlabelled crops: regular expression whose one group captures the camera in a file name, e.g. "_c(\d+)"; "" = none (bounded: docs/security.md).
_C.DATASETS.UNLABELLED.CAMERA_REGEX = ""

_C.DATASETS.SYNTHETIC = CN()
# Synthetic dataset: number of training identities.
_C.DATASETS.SYNTHETIC.NUM_TRAIN_IDS = 100
# Synthetic dataset: number of test identities (query + gallery).
_C.DATASETS.SYNTHETIC.NUM_TEST_IDS = 100
# Synthetic dataset: number of cameras.
_C.DATASETS.SYNTHETIC.NUM_CAMERAS = 6
# Synthetic dataset: images drawn per identity per camera it appears in.
_C.DATASETS.SYNTHETIC.IMAGES_PER_CAMERA = 5
# Synthetic dataset: single images of other people (pid 0) added to the gallery; -1 = NUM_TEST_IDS.
_C.DATASETS.SYNTHETIC.NUM_DISTRACTORS = -1
# Synthetic dataset: seed of the generator (a different seed gives a different dataset).
_C.DATASETS.SYNTHETIC.SEED = 0
# Synthetic dataset: drawn image size [height, width].
_C.DATASETS.SYNTHETIC.IMAGE_SIZE = [128, 64]
# Synthetic dataset: rendering style, "demo", "shift" (another domain: colours, backgrounds, cameras) or "views" (a shift whose cameras each see one side of people; datasets/README.md).
_C.DATASETS.SYNTHETIC.STYLE = "demo"
# Synthetic dataset: what the images show, "person" or "vehicle" (cars, vans, pickups; give it a square IMAGE_SIZE such as [64, 64]).
_C.DATASETS.SYNTHETIC.OBJECT = "person"

_C.DATASETS.VIDEO = CN()
# iLIDS-VID / PRID2011: which of the 10 published train/test splits (0-9) to train and test on.
_C.DATASETS.VIDEO.SPLIT_ID = 0
# MARS: keep the junk tracklets (pid -1) of the gallery; the evaluation ignores them either way (official rule).
_C.DATASETS.VIDEO.MARS_KEEP_JUNK = True
# synthetic_video: frames per tracklet (the DATASETS.SYNTHETIC.* settings draw the people).
_C.DATASETS.VIDEO.FRAMES = 8

_C.DATASETS.VEHICLEID = CN()
# VehicleID: vehicles of the test list test_list_<N>.txt: 800, 1600 or 2400 (small/medium/large), or 3200, 6000, 13164.
_C.DATASETS.VEHICLEID.TEST_SIZE = 800

_C.DATASETS.VERIWILD = CN()
# VERI-Wild: vehicles of the test set test_<N>.txt (gallery) + test_<N>_query.txt: 3000, 5000 or 10000 (small/medium/large).
_C.DATASETS.VERIWILD.TEST_SIZE = 3000

# ---- Data loading --------------------------------------------------------------
_C.DATALOADER = CN()
# Training sampler: "identity" (P identities x K images per batch) or "random" (plain shuffle).
_C.DATALOADER.SAMPLER = "identity"
# K: images per identity in a batch for the identity sampler (P = IMS_PER_BATCH / K).
_C.DATALOADER.NUM_INSTANCE = 4
# Data-loading worker processes; 0 loads in the main process.
_C.DATALOADER.NUM_WORKERS = 4
_C.DATALOADER.VIDEO = CN()
# Video data: frames of a training clip, "random", "evenly", "consecutive" or "stride" (reid/data/frame_sampling.py).
_C.DATALOADER.VIDEO.SAMPLER = "random"
# Video data: frames per training clip (IMS_PER_BATCH counts clips), and per test tracklet with TEST_SAMPLER "evenly".
_C.DATALOADER.VIDEO.SEQ_LEN = 4
# Video data: step between the frames of the "stride" sampler.
_C.DATALOADER.VIDEO.STRIDE = 1
# Video data: frames of a test tracklet, "all" (TEST.IMS_PER_BATCH frames at a time, pooled in chunks) or "evenly" (SEQ_LEN).
_C.DATALOADER.VIDEO.TEST_SAMPLER = "all"

# ---- Solver --------------------------------------------------------------------
_C.SOLVER = CN()
# Optimizer: "SGD", "Adam", "AMSGrad" (Adam's AMSGrad variant, torchreid's "amsgrad") or "AdamW".
_C.SOLVER.OPTIMIZER = "Adam"
# Base learning rate.
_C.SOLVER.BASE_LR = 3.5e-4
# SGD momentum (also Adam's beta1).
_C.SOLVER.MOMENTUM = 0.9
# Adam/AMSGrad/AdamW: beta2, the decay of the squared-gradient average (torchreid's recipe: 0.99).
_C.SOLVER.BETA2 = 0.999
# SGD: use Nesterov momentum.
_C.SOLVER.NESTEROV = False
# Weight decay of ordinary weights.
_C.SOLVER.WEIGHT_DECAY = 5e-4
# Weight decay of normalisation-layer parameters (BN weight/bias, GeM p).
_C.SOLVER.WEIGHT_DECAY_NORM = 5e-4
# Weight decay of bias parameters.
_C.SOLVER.WEIGHT_DECAY_BIAS = 5e-4
# Learning-rate multiplier for bias parameters.
_C.SOLVER.BIAS_LR_FACTOR = 1.0
# Learning-rate multiplier for identity-head parameters (class weights).
_C.SOLVER.HEADS_LR_FACTOR = 1.0
# Training length in epochs.
_C.SOLVER.MAX_EPOCH = 120
# Total batch size (over all processes); P x K with the identity sampler.
_C.SOLVER.IMS_PER_BATCH = 64
# LR schedule after warmup: "multistep" or "cosine".
_C.SOLVER.SCHED = "multistep"
# Multistep: epochs at which the LR is multiplied by GAMMA.
_C.SOLVER.STEPS = [40, 90]
# Multistep: LR decay factor.
_C.SOLVER.GAMMA = 0.1
# Cosine: final LR as a fraction of BASE_LR.
_C.SOLVER.MIN_LR_FACTOR = 0.0
# Warmup length in iterations (linear ramp from WARMUP_FACTOR x BASE_LR); 0 = none.
_C.SOLVER.WARMUP_ITERS = 2000
# LR factor at the first warmup iteration.
_C.SOLVER.WARMUP_FACTOR = 0.1
# Freeze the backbone (train neck and head only) for this many first iterations.
_C.SOLVER.FREEZE_ITERS = 0
# Clip the global gradient norm to this value; 0 = no clipping.
_C.SOLVER.CLIP_GRAD_NORM = 0.0
# Save a checkpoint every this many epochs (the last epoch is always saved).
_C.SOLVER.CHECKPOINT_PERIOD = 10
# Periodic checkpoints (model_XXXX.pth) kept on disk, newest first; 0 = keep all.
_C.SOLVER.CHECKPOINT_KEEP = 2
# Print and record training metrics every this many iterations.
_C.SOLVER.LOG_PERIOD = 20
# Mixed precision: "off", "bf16" (CPU and GPU autocast) or "fp16" (CUDA, with a gradient scaler).
_C.SOLVER.AMP = "off"
# Use channels_last memory format on CUDA (faster convolutions with AMP).
_C.SOLVER.CHANNELS_LAST = True

_C.SOLVER.PROMPT_STAGE = CN()
# CLIP-ReID's first stage (MODEL.CLIPREID.PROMPT_LEARNING): epochs over the training images' features (CLIP-ReID: 120 persons, 60 vehicles).
_C.SOLVER.PROMPT_STAGE.MAX_EPOCH = 120
# First stage: images (their features, computed once) per batch, over all processes.
_C.SOLVER.PROMPT_STAGE.IMS_PER_BATCH = 64
# First stage: Adam's learning rate of the prompt tokens.
_C.SOLVER.PROMPT_STAGE.BASE_LR = 3.5e-4
# First stage: weight decay of the prompt tokens.
_C.SOLVER.PROMPT_STAGE.WEIGHT_DECAY = 1e-4
# First stage: linear warmup length in epochs (stepped per iteration), from WARMUP_FACTOR x BASE_LR.
_C.SOLVER.PROMPT_STAGE.WARMUP_EPOCHS = 5
# First stage: LR factor at the first warmup iteration (CLIP-ReID: 1e-5 / 3.5e-4).
_C.SOLVER.PROMPT_STAGE.WARMUP_FACTOR = 0.028571
# First stage: cosine decay to this fraction of BASE_LR (CLIP-ReID: 1e-6 / 3.5e-4).
_C.SOLVER.PROMPT_STAGE.MIN_LR_FACTOR = 0.0028571
# First stage: save a checkpoint (OUTPUT_DIR/prompt_stage) every this many epochs (the last is always saved).
_C.SOLVER.PROMPT_STAGE.CHECKPOINT_PERIOD = 10

# ---- Testing -------------------------------------------------------------------
_C.TEST = CN()
# Evaluate every this many epochs during training (and after the last); 0 = only after training.
_C.TEST.EVAL_PERIOD = 20
# Batch size for feature extraction.
_C.TEST.IMS_PER_BATCH = 128
# Distance between features: "cosine" (1 - cos) or "euclidean".
_C.TEST.METRIC = "cosine"
# Average each feature with that of the horizontally flipped image.
_C.TEST.FLIP = False
# Mixed precision for feature extraction: "off", "bf16" or "fp16" (CUDA).
_C.TEST.AMP = "off"
# Highest rank reported in the CMC curve.
_C.TEST.MAX_RANK = 50
# Hold out this many training identities as a validation split for choosing the best epoch;
# 0 = no validation split, the last checkpoint is the result (never select on the test split).
_C.TEST.VAL_IDS = 0
# Test sets with the gallery-draws protocol (vehicleid): draws of one random gallery image per identity, results averaged (>= 1).
_C.TEST.GALLERY_DRAWS = 10
# Seed of the gallery draws (draw d uses numpy's generator seeded [seed, d]), so the results repeat.
_C.TEST.GALLERY_DRAW_SEED = 0

_C.TEST.RERANK = CN()
# Apply k-reciprocal re-ranking (Zhong et al. 2017) to the test distances.
_C.TEST.RERANK.ENABLED = False
# Re-ranking k1 (size of the k-reciprocal neighbourhood).
_C.TEST.RERANK.K1 = 20
# Re-ranking k2 (local query expansion).
_C.TEST.RERANK.K2 = 6
# Re-ranking lambda: weight of the original distance in the final distance.
_C.TEST.RERANK.LAMBDA = 0.3
# Nearest neighbours of re-ranking: "exact", "ivf" (approximate, faiss k-means cells; pip install faiss-cpu) or "auto" (ivf from APPROX_MIN_SIZE images on).
_C.TEST.RERANK.NEIGHBOURS = "auto"
# With NEIGHBOURS "auto": query + gallery images from which the approximate pass is used (a positive integer).
_C.TEST.RERANK.APPROX_MIN_SIZE = 500000
# Approximate pass: cells of ~64 images each cell is compared with (more: nearer the exact lists, slower; 512 at 100,000 images: clusters ARI 0.995 against exact).
_C.TEST.RERANK.APPROX_PROBES = 256

_C.TEST.VERIFICATION = CN()
# Also report verification metrics of the test split: ROC, TAR at each FAR below, EER, thresholds.
_C.TEST.VERIFICATION.ENABLED = False
# False accept rates (each in (0, 1)) for TAR, open-set DIR and the calibrated thresholds of a run.
_C.TEST.VERIFICATION.FARS = [1e-2, 1e-3, 1e-4]

_C.TEST.OPEN_SET = CN()
# Open-set identification: hold this many query identities out of the gallery (their queries become
# "nobody we know") and report DIR at each TEST.VERIFICATION.FARS; 0 = off.
_C.TEST.OPEN_SET.HOLDOUT_IDS = 0
# Seed that draws the held-out identities.
_C.TEST.OPEN_SET.SEED = 0

_C.TEST.AQE = CN()
# Alpha query expansion (top-k neighbours of each query) before computing distances.
_C.TEST.AQE.ENABLED = False
# AQE: number of gallery neighbours averaged into each query.
_C.TEST.AQE.QE_K = 5
# AQE: exponent alpha of the similarity weights.
_C.TEST.AQE.ALPHA = 3.0

# ---- Learning without labels (docs/training.md, "No labels?") ------------------
_C.UDA = CN()
# Train without identity labels: before each epoch, cluster the training images into pseudo-identities.
_C.UDA.ENABLED = False
# Iterations per epoch (P x K batches over the current pseudo-labels); fixed, so the LR schedule is too.
_C.UDA.ITERS_PER_EPOCH = 200
# k1 of the k-reciprocal Jaccard distance the images are clustered on (its neighbourhood size).
_C.UDA.K1 = 30
# k2 of that distance (local query expansion; 1 = none).
_C.UDA.K2 = 6
# DBSCAN radius: the largest Jaccard distance at which two images are neighbours, in (0, 1); "auto" = read from the data every epoch (docs/training.md).
_C.UDA.EPS = 0.6
# EPS auto: the radii tried, [first, last] in steps of 0.025; the middle of the widest range where the cluster count stays stable wins.
_C.UDA.EPS_RANGE = [0.3, 0.8]
# DBSCAN: neighbours within EPS (the image itself included) that make an image the core of a cluster.
_C.UDA.MIN_SAMPLES = 4
# Nearest neighbours of the clustering: "exact", "ivf" (approximate, faiss k-means cells; pip install faiss-cpu) or "auto" (ivf from APPROX_MIN_SIZE images on).
_C.UDA.NEIGHBOURS = "auto"
# With NEIGHBOURS "auto": training images from which the approximate pass is used (a positive integer).
_C.UDA.APPROX_MIN_SIZE = 500000
# Approximate pass: cells of ~64 images each cell is compared with (more: nearer the exact lists, slower; 512 at 100,000 images: clusters ARI 0.995 against exact).
_C.UDA.APPROX_PROBES = 256
# Temperature tau of the cluster-memory contrastive loss (the identity loss in UDA runs).
_C.UDA.TEMPERATURE = 0.05
# Momentum m of the per-step memory update c <- normalise(m c + (1 - m) q).
_C.UDA.MOMENTUM = 0.1
# Memory update from a batch: "mean" (mean feature of each cluster) or "hard" (its least similar feature).
_C.UDA.MEMORY_UPDATE = "mean"
# Camera-aware proxies (CAP, Wang et al. AAAI 2021): every cluster split by camera, an intra-camera and an inter-camera contrastive loss, so clusters stop forming per camera; true needs camera ids, "auto" = on when the images have ids from >= 2 cameras (else one line says it is off).
_C.UDA.CAMERA_AWARE = False
# CAMERA_AWARE: weight lambda of the inter-camera loss (CAP: 0.5).
_C.UDA.CAMERA_INTER_WEIGHT = 0.5
# CAMERA_AWARE: hardest proxies of other clusters that are the inter-camera loss's negatives (CAP: 50).
_C.UDA.CAMERA_HARD_NEGATIVES = 50
# Camera-balanced neighbours for the Jaccard distance: each image's neighbour list takes the nearest of every camera in turn (exact pass); true needs camera ids, "auto" as CAMERA_AWARE.
_C.UDA.CAMERA_NEIGHBOURS = False
# Regex (one group) capturing a crop's tracklet from its file name, e.g. '^(.+_t\d+)_f\d+' for tools/tracks_to_reid.py crops: each tracklet joins its crops' majority cluster; '' = off.
_C.UDA.TRACKLET_REGEX = ""
# With TRACKLET_REGEX: cut a tracklet where its crops disagree (a tracker's identity switch) before it is kept whole: at the cut that best separates its two parts, when the cosine similarity of the parts' mean features is below this (0.5 suits trained models; 0 = never cut).
_C.UDA.TRACKLET_SPLIT = 0.0
# Runtime of the clustering's feature pass: "torch", "onnxruntime" (the weights exported each epoch, run on the CPU) or "auto" (onnxruntime on a CPU from 4,000 crops with TEST.FLIP and TEST.AMP off, else torch).
_C.UDA.EXTRACT_RUNTIME = "auto"

# Keys that take a number (NUMBER_OR_WORD) or true/false (BOOL_OR_WORD), or one of these words (chosen from the data).
NUMBER_OR_WORD = {"UDA.EPS": ("auto",)}
BOOL_OR_WORD = {"UDA.CAMERA_AWARE": ("auto",), "UDA.CAMERA_NEIGHBOURS": ("auto",)}

# Keys whose values name files or folders. A config stored inside a checkpoint (someone else's,
# perhaps) never sets them: reid.config.merge_from_text leaves them at their defaults, so a
# downloaded file cannot make a tool read or write a path the user did not name.
FILE_KEYS = (
    "OUTPUT_DIR", "MODEL.WEIGHTS", "MODEL.BACKBONE.PRETRAINED_PATH", "DATASETS.ROOT", "DATASETS.CUSTOM.TRAIN_LIST",
    "DATASETS.CUSTOM.QUERY_LIST", "DATASETS.CUSTOM.GALLERY_LIST", "DATASETS.FOLDERS.QUERY_PATH",
    "DATASETS.FOLDERS.GALLERY_PATH", "DATASETS.UNLABELLED.DIR", "DATASETS.UNLABELLED.LIST",
)
